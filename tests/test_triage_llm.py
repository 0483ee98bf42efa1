"""The triage agent through funnel's real LLM backends, over loopback HTTP to servers that speak the
documented Ollama and OpenAI tool-calling wire formats (the model's side is scripted; the agent loop,
the backends and the tools are real)."""

from __future__ import annotations

import json

import pytest
from test_llm_backends import Reply, fake, ollama_final, openai_completion  # noqa: F401 (fixture)
from test_triage import SAMPLE_REPO, raised_in_sample_app

from funnel.apps.state.incident_schema import AnalysisStatus, ErrorReport
from funnel.apps.triage.service import TriageService
from funnel.embed import HashingEmbedder
from funnel.generate.ollama import OllamaChat
from funnel.generate.openai_compat import OpenAIChat
from funnel.index.lance import LanceStore
from funnel.pipeline import Pipeline

ANALYSIS = {
    "summary": "Ordering an unknown SKU crashes checkout.",
    "root_cause": "Inventory.available indexes _stock with an unknown SKU (KeyError).",
    "suspected_files": [{"path": "app/inventory.py", "line_start": 17, "line_end": 18, "reason": "raises"}],
    "fix_suggestion": "Check the SKU exists before reserving.",
    "confidence": 0.7,
}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    p = Pipeline.build(store=LanceStore(tmp_path_factory.mktemp("idx")), embedder=HashingEmbedder(), reranker=None)
    p.ingest([SAMPLE_REPO])
    return p


def report() -> ErrorReport:
    return ErrorReport(service="shop", message="checkout failed", stack_trace=raised_in_sample_app("unknown_sku"))


def test_openai_tool_calling_agent(fake, pipeline):  # noqa: F811
    def script(path, body):
        if len([m for m in body["messages"] if m["role"] == "tool"]) == 0:
            call = {"id": "call_1", "type": "function",
                    "function": {"name": "read_file", "arguments": json.dumps({"path": "app/inventory.py"})}}
            return Reply(openai_completion({"content": None, "tool_calls": [call]}, finish="tool_calls"))
        return Reply(openai_completion({"content": json.dumps(ANALYSIS)}))

    fake.answer(script)
    service = TriageService(pipeline, repo_root=SAMPLE_REPO, chat=OpenAIChat(fake.url + "/v1", model="m"))
    outcome = service.triage(report())
    assert outcome.result.analysis_status is AnalysisStatus.OK, outcome.result.analysis_reason
    assert outcome.result.analysis.suspected_files[0].path == "app/inventory.py"
    first, second = fake.requests[0].body, fake.requests[1].body
    assert {t["function"]["name"] for t in first["tools"]} == {"search_files", "read_file"}
    assert "app/inventory.py" in first["messages"][1]["content"]  # the ranked files are in the prompt
    tool_message = next(m for m in second["messages"] if m["role"] == "tool")
    assert tool_message["tool_call_id"] == "call_1" and "def reserve" in tool_message["content"]
    assert outcome.tool_calls == ["read_file(app/inventory.py)"]


def test_ollama_tool_calling_agent(fake, pipeline):  # noqa: F811
    def script(path, body):
        if not any(m["role"] == "tool" for m in body["messages"]):
            call = {"function": {"name": "search_files", "arguments": {"query": "reserve stock"}}}
            return Reply(ollama_final(message={"role": "assistant", "content": "", "tool_calls": [call]}))
        return Reply(ollama_final(message={"role": "assistant", "content": json.dumps(ANALYSIS)}))

    fake.answer(script)
    service = TriageService(pipeline, repo_root=SAMPLE_REPO, chat=OllamaChat(fake.url, model="qwen3"))
    outcome = service.triage(report())
    assert outcome.result.analysis_status is AnalysisStatus.OK
    tool_message = next(m for m in fake.requests[1].body["messages"] if m["role"] == "tool")
    assert tool_message["tool_name"] == "search_files" and "app/inventory.py" in tool_message["content"]


def test_an_llm_that_answers_garbage_is_reported_not_trusted(fake, pipeline):  # noqa: F811
    fake.answer(Reply(openai_completion({"content": '{"summary": "x", "confidence": 7}'})))
    service = TriageService(pipeline, repo_root=SAMPLE_REPO, chat=OpenAIChat(fake.url + "/v1", model="m"))
    outcome = service.triage(report())
    assert outcome.result.analysis_status is AnalysisStatus.INVALID and outcome.result.analysis is None
    assert outcome.result.files[0].path == "app/inventory.py"  # the ranked files are still there


def test_an_llm_server_that_is_down(pipeline):
    service = TriageService(pipeline, repo_root=SAMPLE_REPO,
                            chat=OpenAIChat("http://127.0.0.1:9/v1", model="m", timeout=2))
    outcome = service.triage(report())
    assert outcome.result.analysis_status is AnalysisStatus.LLM_UNAVAILABLE
    assert "cannot reach" in outcome.result.analysis_reason
