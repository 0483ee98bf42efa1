"""Can a prebuilt (binary wheel) llama.cpp binding replace the source-built llama-cpp-python?

Runs each candidate binding in its own interpreter (its own venv), as a subprocess of this script, on the
same GGUF, 2 threads, greedy decoding; candidates are interleaved over ROUNDS rounds (order rotated each
round) so that a shared, noisy machine hurts them alike; the table shows medians.

Per run (one fresh process): load time (import + model load), peak RSS (ru_maxrss, includes the mmapped
model pages that were touched), call 1 = system prompt + user message (~750 prompt tokens: three passages
from --docs and a question), 64 new tokens, streamed; call 2 = same system prompt and passages, a different
question, to see whether the KV cache keeps the shared prefix (its time to first token then drops to a
fraction of call 1's); then (first round only) a JSON-schema constrained call (capability check, untimed). The prompt is the
Qwen2.5 ChatML rendering; each binding reports whether it can render it itself from the GGUF's
`tokenizer.chat_template`. The first 64 generated tokens are compared with the first venv's (the reference,
normally the source build).

Adapters (the NAME given to --venv picks one by prefix):
  llama-cpp-python*  llama_cpp.Llama + create_chat_completion(stream=True), as funnel.generate.local uses it
  gpt4all*           gpt4all.GPT4All(allow_download=False, device="cpu"); ChatML given by hand, special=True
  llama-cpp-cffi*    the low-level cffi `lib` of llama-cpp-cffi (its high-level API downloads an HF tokenizer)

Making the venvs (any Python 3.11; wheels from PyPI, nothing compiled):
  python3.11 -m venv /tmp/pbenv-gpt4all && /tmp/pbenv-gpt4all/bin/pip install gpt4all==2.8.2
  python3.11 -m venv /tmp/pbenv-cffi && /tmp/pbenv-cffi/bin/pip install llama-cpp-cffi==0.4.42 cffi
      (the wheel forgets to depend on cffi; on a libstdc++ older than GCC 14's its .so fails to import with
       "undefined symbol: __cxa_call_terminate": pass --preload llama-cpp-cffi=/path/libcxa_shim.so, a shim
       built from `extern "C" void __cxa_call_terminate(void*) noexcept { std::terminate(); }`)
  the source build: the project's own .venv (pip install llama-cpp-python==0.3.36, compiled).

Run:
  python bench/prebuilt_binding.py --model ~/.cache/funnel/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \
      --venv llama-cpp-python=.venv/bin/python --venv gpt4all=/tmp/pbenv-gpt4all/bin/python \
      --venv llama-cpp-cffi=/tmp/pbenv-cffi/bin/python --out bench/results/prebuilt_binding.json
Optional: --wheel NAME=PATH (size and platform tag in the table), --install-s NAME=SECONDS (recorded),
--rounds N, --threads N, --max-tokens N, --docs DIR.
This file is also the driver: `python prebuilt_binding.py --driver ADAPTER --spec JSON` (stdlib only here).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SYSTEM_PROMPT = (  # funnel.generate.llm.SYSTEM_PROMPT, copied so the driver needs no funnel import
    "You answer questions using ONLY the numbered context passages the user gives you. "
    "After every statement, cite the passage(s) it comes from by number in square brackets, "
    "like [1] or [2][3]. "
    "When the question asks several things, answer every part of it, each with its citation. "
    "If the passages do not contain the answer, reply with this sentence alone: "
    "\"The documents do not contain the answer.\" Never use outside knowledge."
)
QUESTION_1 = "Summarise each passage in three sentences, citing it, then say what the three have in common."
QUESTION_2 = "List every date, amount and percentage mentioned in the passages, each with its citation."
JSON_SCHEMA = {"type": "object", "properties": {"title": {"type": "string"}, "year": {"type": "integer"}},
               "required": ["title", "year"]}
JSON_USER = ("Reply with a JSON object with the document's title and year for: "
             "'Board minutes, third quarter 2024, approved on 14 October 2024.'")


def chatml(messages: list[dict]) -> str:
    """What Qwen2.5's chat template renders for system+user messages, generation prompt added."""
    out = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return out + "<|im_start|>assistant\n"


# ============================================================================================ drivers
# Each returns a dict; runs inside the candidate's venv. A "chat" call returns
# {"ttft_s", "total_s", "n_prompt", "n_gen", "text", "chunks"}.

def _timed_stream(pieces) -> tuple[float | None, float, list[str]]:
    t0 = time.perf_counter()
    first = None
    out = []
    for p in pieces:
        if p and first is None:
            first = time.perf_counter()
        out.append(p)
    return t0, first, out


def drive_llama_cpp_python(spec: dict) -> dict:
    res: dict = {}
    t = time.perf_counter()
    import llama_cpp
    from llama_cpp import Llama
    res["import_s"] = time.perf_counter() - t
    llm = Llama(model_path=spec["model"], n_ctx=4096, n_threads=spec["threads"], n_batch=512, verbose=False)
    res["load_s"] = time.perf_counter() - t
    res["version"] = llama_cpp.__version__
    tmpl = llm.metadata.get("tokenizer.chat_template")
    res["chat_format"] = llm.chat_format
    if tmpl:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        rendered = Jinja2ChatFormatter(tmpl, "", "")(messages=spec["messages_1"]).prompt
        res["template_from_gguf"] = True
        res["template_matches_chatml"] = rendered == chatml(spec["messages_1"])

    def chat(messages):
        n_prompt = len(llm.tokenize(chatml(messages).encode(), add_bos=False, special=True))
        stream = llm.create_chat_completion(messages=messages, max_tokens=spec["max_tokens"], temperature=0,
                                            stream=True)
        finish = []

        def deltas():
            for ch in stream:
                c = ch["choices"][0]
                if c.get("finish_reason"):
                    finish.append(c["finish_reason"])
                yield (c.get("delta") or {}).get("content") or ""
        t0, first, out = _timed_stream(deltas())
        end = time.perf_counter()
        text = "".join(out)
        n_gen = llm.n_tokens - n_prompt + (1 if finish and finish[-1] == "length" else 0)
        return {"ttft_s": first - t0, "total_s": end - t0, "n_prompt": n_prompt, "n_gen": n_gen, "text": text,
                "chunks": sum(1 for p in out if p)}

    res["call_1"] = chat(spec["messages_1"])
    res["call_2"] = chat(spec["messages_2"])
    res["streaming"] = res["call_1"]["chunks"] > 1
    res["tokenize"] = True
    if not spec.get("json_check"):
        return res
    # JSON schema, the way funnel.generate.local asks for it
    try:
        r = llm.create_chat_completion(messages=spec["messages_json"], max_tokens=96, temperature=0,
                                       response_format={"type": "json_object", "schema": JSON_SCHEMA})
        txt = r["choices"][0]["message"]["content"]
        res["json_schema"] = _json_ok(txt)
        res["json_text"] = txt
    except Exception as e:  # noqa: BLE001
        res["json_schema"] = f"error: {e}"
    return res


def _json_ok(txt: str) -> bool:
    try:
        obj = json.loads(txt)
    except ValueError:
        return False
    return isinstance(obj, dict) and isinstance(obj.get("title"), str) and isinstance(obj.get("year"), int)


def drive_gpt4all(spec: dict) -> dict:
    res: dict = {}
    t = time.perf_counter()
    import gpt4all
    from gpt4all import GPT4All
    res["import_s"] = time.perf_counter() - t
    model = Path(spec["model"])
    g = GPT4All(model.name, model_path=str(model.parent), allow_download=False, n_threads=spec["threads"],
                device="cpu", n_ctx=4096, ngl=0, verbose=False)
    res["load_s"] = time.perf_counter() - t
    from importlib.metadata import version
    res["version"] = version("gpt4all")
    res["backend"] = g.backend
    # 2.8.x reads prompt templates from its own models3.json (downloaded) or takes one by hand; it never
    # reads tokenizer.chat_template from the GGUF. Tokenizing is not exposed to Python either.
    res["template_from_gguf"] = False
    res["tokenize"] = False

    def chat(messages):
        counted = [0]

        def on_prompt_token(token_id):  # the backend calls it once per prompt token it evaluates
            counted[0] += 1
            return True
        g.model._prompt_callback = on_prompt_token
        stream = g.model.prompt_model_streaming(
            chatml(messages), "%1", n_predict=spec["max_tokens"], top_k=1, top_p=1.0, min_p=0.0, temp=0.0,
            n_batch=512, repeat_penalty=1.0, repeat_last_n=0, reset_context=True, special=True)
        t0, first, out = _timed_stream(stream)
        end = time.perf_counter()
        return {"ttft_s": first - t0, "total_s": end - t0, "n_prompt": counted[0], "n_gen": sum(1 for _ in out),
                "text": "".join(out), "chunks": sum(1 for p in out if p)}

    res["call_1"] = chat(spec["messages_1"])
    res["call_2"] = chat(spec["messages_2"])
    res["streaming"] = res["call_1"]["chunks"] > 1
    res["json_schema"] = False  # no grammar / schema option in the 2.8 API
    res["gpt4all_file"] = gpt4all.__file__
    return res


def drive_llama_cpp_cffi_lowlevel(spec: dict) -> dict:
    import codecs
    import glob
    import importlib.machinery
    import importlib.util
    import site
    res: dict = {}
    t = time.perf_counter()
    paths = [p for d in site.getsitepackages() for p in glob.glob(os.path.join(d, "llama", "_llama_cpp_cpu*.so"))]
    loader = importlib.machinery.ExtensionFileLoader("_llama_cpp_cpu", paths[0])
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader("_llama_cpp_cpu", loader))
    loader.exec_module(mod)
    lib, ffi = mod.lib, mod.ffi
    res["import_s"] = time.perf_counter() - t
    lib.llama_backend_init()
    mp = lib.llama_model_default_params()
    mp.n_gpu_layers = 0
    model = lib.llama_model_load_from_file(spec["model"].encode(), mp)
    assert model != ffi.NULL, "model load failed"
    cp = lib.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = 4096, 512, 512
    cp.n_threads = cp.n_threads_batch = spec["threads"]
    ctx = lib.llama_init_from_model(model, cp)
    assert ctx != ffi.NULL, "context failed"
    vocab = lib.llama_model_get_vocab(model)
    res["load_s"] = time.perf_counter() - t
    from importlib.metadata import version
    res["version"] = version("llama-cpp-cffi")
    res["system_info"] = ffi.string(lib.llama_print_system_info()).decode()

    def tokenize(text: str) -> list[int]:
        b = text.encode()
        buf = ffi.new("int32_t[]", len(b) + 16)
        n = lib.llama_tokenize(vocab, b, len(b), buf, len(b) + 16, False, True)
        assert n >= 0
        return list(buf[0:n])

    def render(messages) -> str:
        tmpl = lib.llama_model_chat_template(model, ffi.NULL)  # GGUF tokenizer.chat_template
        keep = [(ffi.new("char[]", m["role"].encode()), ffi.new("char[]", m["content"].encode())) for m in messages]
        arr = ffi.new("struct llama_chat_message[]", len(messages))
        for i, (r, c) in enumerate(keep):
            arr[i].role, arr[i].content = r, c
        size = 2 * sum(len(m["content"]) for m in messages) + 256
        buf = ffi.new("char[]", size)
        n = lib.llama_chat_apply_template(tmpl, arr, len(messages), True, buf, size)
        return ffi.unpack(buf, n).decode()

    rendered = render(spec["messages_1"])
    res["template_from_gguf"] = True  # C llama_chat_apply_template: built-in templates picked by the GGUF's
    res["template_matches_chatml"] = rendered == chatml(spec["messages_1"])  # template (no Jinja, no tools)
    res["tokenize"] = True
    batch = lib.llama_batch_init(512, 0, 1)
    cached: list[int] = []  # tokens now in the KV cache (sequence 0)

    def decode(tokens: list[int], start: int) -> None:
        for off in range(0, len(tokens), 512):
            part = tokens[off:off + 512]
            batch.n_tokens = len(part)
            for i, tok in enumerate(part):
                batch.token[i] = tok
                batch.pos[i] = start + off + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = off + i == len(tokens) - 1
            assert lib.llama_decode(ctx, batch) == 0, "llama_decode failed"

    def generate(prompt_tokens: list[int], max_tokens: int, grammar: bytes | None = None):
        """Yields text pieces; keeps the common prefix of the KV cache as llama-cpp-python does."""
        nonlocal cached
        n = 0
        while n < min(len(cached), len(prompt_tokens)) and cached[n] == prompt_tokens[n]:
            n += 1
        n = min(n, len(prompt_tokens) - 1)  # re-evaluate at least one token to get logits
        lib.llama_kv_self_seq_rm(ctx, 0, n, -1)
        decode(prompt_tokens[n:], n)
        cached = list(prompt_tokens)
        res.setdefault("reused", []).append(n)
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        if grammar:
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_grammar(vocab, grammar, b"root"))
        lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_greedy())
        dec = codecs.getincrementaldecoder("utf-8")("replace")
        piece = ffi.new("char[]", 256)
        try:
            for _ in range(max_tokens):
                tok = lib.llama_sampler_sample(chain, ctx, -1)
                if lib.llama_vocab_is_eog(vocab, tok):
                    break
                k = lib.llama_token_to_piece(vocab, tok, piece, 256, 0, False)
                yield tok, dec.decode(ffi.unpack(piece, k))
                decode([tok], len(cached))
                cached.append(tok)
        finally:
            lib.llama_sampler_free(chain)

    def chat(messages):
        toks = tokenize(render(messages))
        gen: list[int] = []

        def pieces():
            for tok, text in generate(toks, spec["max_tokens"]):
                gen.append(tok)
                yield text
        t0, first, out = _timed_stream(pieces())
        end = time.perf_counter()
        return {"ttft_s": first - t0, "total_s": end - t0, "n_prompt": len(toks), "n_gen": len(gen),
                "text": "".join(out), "chunks": sum(1 for p in out if p), "tokens": gen}

    res["call_1"] = chat(spec["messages_1"])
    res["call_2"] = chat(spec["messages_2"])
    res["streaming"] = True  # the loop is ours: one piece per token
    if not spec.get("json_check"):
        return res
    try:
        g = lib.llama_json_schema_to_grammar(ffi.new("char[]", json.dumps(JSON_SCHEMA).encode()))
        grammar = ffi.string(g)
        lib.free(g)
        txt = "".join(p for _, p in generate(tokenize(render(spec["messages_json"])), 96, grammar))
        res["json_schema"] = _json_ok(txt)
        res["json_text"] = txt
    except Exception as e:  # noqa: BLE001
        res["json_schema"] = f"error: {e}"
    return res


ADAPTERS = {"llama-cpp-python": drive_llama_cpp_python, "gpt4all": drive_gpt4all,
            "llama-cpp-cffi": drive_llama_cpp_cffi_lowlevel}


def adapter_for(name: str) -> str:
    for key in ADAPTERS:
        if name.startswith(key):
            return key
    raise SystemExit(f"no adapter for {name!r}: the name must start with one of {sorted(ADAPTERS)}")


def driver_main(adapter: str, spec: dict) -> None:
    import resource
    t = time.perf_counter()
    try:
        res = ADAPTERS[adapter](spec)
        res["ok"] = True
    except Exception as e:  # noqa: BLE001
        import traceback
        res = {"ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}
    res["wall_s"] = time.perf_counter() - t
    res["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    res["python"] = sys.version.split()[0]
    print("@@RESULT@@" + json.dumps(res))


# ======================================================================================= orchestrator

def passages(docs: Path, words_each: int) -> str:
    files = sorted(p for p in docs.iterdir() if p.suffix in (".txt", ".md"))[:3]
    out = []
    for i, p in enumerate(files, 1):
        words = p.read_text(encoding="utf-8", errors="replace").split()
        out.append(f"[{i}] {p.stem.replace('_', ' ')}\n" + " ".join(words[:words_each]))
    return "\n\n".join(out)


def build_spec(args) -> dict:
    ctx = passages(Path(args.docs), args.words_per_passage)

    def user(q):
        return f"Context passages:\n\n{ctx}\n\nQuestion: {q}"
    sysm = {"role": "system", "content": SYSTEM_PROMPT}
    return {"model": str(Path(args.model).expanduser()), "threads": args.threads, "max_tokens": args.max_tokens,
            "messages_1": [sysm, {"role": "user", "content": user(QUESTION_1)}],
            "messages_2": [sysm, {"role": "user", "content": user(QUESTION_2)}],
            "messages_json": [sysm, {"role": "user", "content": JSON_USER}]}


def run_one(name: str, python: str, spec: dict, preload: str | None, timeout: float) -> dict:
    env = dict(os.environ)
    if preload:
        env["LD_PRELOAD"] = preload
    env.setdefault("OMP_NUM_THREADS", str(spec["threads"]))
    cmd = [python, os.path.abspath(__file__), "--driver", adapter_for(name), "--spec", json.dumps(spec)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout:g} s"}
    for line in p.stdout.splitlines():
        if line.startswith("@@RESULT@@"):
            return json.loads(line[len("@@RESULT@@"):])
    return {"ok": False, "error": f"rc={p.returncode}", "stderr": p.stderr[-2000:]}


def kv(items: list[str]) -> dict[str, str]:
    out = {}
    for it in items or []:
        k, _, v = it.partition("=")
        out[k] = v
    return out


def derived(r: dict) -> dict:
    c1, c2 = r["call_1"], r["call_2"]
    gen_s = c1["total_s"] - c1["ttft_s"]
    return {"load_s": r["load_s"], "peak_rss_mib": r["peak_rss_mib"],
            "prompt_tok_s": c1["n_prompt"] / c1["ttft_s"],
            "gen_tok_s": (c1["n_gen"] - 1) / gen_s if gen_s > 0 else None,
            "ttft_1_s": c1["ttft_s"], "ttft_2_s": c2["ttft_s"], "ttft_2_over_1": c2["ttft_s"] / c1["ttft_s"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--driver")
    ap.add_argument("--spec")
    ap.add_argument("--model")
    ap.add_argument("--venv", action="append", help="NAME=PYTHON; the first is the reference")
    ap.add_argument("--preload", action="append", help="NAME=LIB for LD_PRELOAD")
    ap.add_argument("--wheel", action="append", help="NAME=WHEEL for size and tag")
    ap.add_argument("--install-s", action="append", help="NAME=SECONDS, recorded as given")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--words-per-passage", type=int, default=170)
    ap.add_argument("--docs", default=str(Path(__file__).resolve().parent.parent / "samples" / "docs"))
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.driver:
        driver_main(args.driver, json.loads(args.spec))
        return
    venvs = kv(args.venv)
    preload, wheels, install = kv(args.preload), kv(args.wheel), kv(args.install_s)
    spec = build_spec(args)
    names = list(venvs)
    runs: dict[str, list[dict]] = {n: [] for n in names}
    for rnd in range(args.rounds):
        order = names[rnd % len(names):] + names[:rnd % len(names)]
        for n in order:
            t = time.time()
            r = run_one(n, venvs[n], dict(spec, json_check=rnd == 0), preload.get(n), args.timeout)
            r["loadavg_after"] = os.getloadavg()
            r["round"] = rnd
            runs[n].append(r)
            extra = "" if r.get("ok") else " " + r.get("error", "")
            print(f"round {rnd + 1} {n}: {'ok' if r.get('ok') else 'FAILED'} in {time.time() - t:.1f} s{extra}",
                  file=sys.stderr, flush=True)
    ref = names[0]
    ref_text = next((r["call_1"]["text"] for r in runs[ref] if r.get("ok")), None)
    summary = {}
    for n in names:
        ok = [r for r in runs[n] if r.get("ok")]
        s: dict = {"adapter": adapter_for(n), "python": venvs[n], "runs_ok": len(ok), "runs": len(runs[n])}
        if ok:
            d = [derived(r) for r in ok]
            for k in d[0]:
                vals = [x[k] for x in d if x[k] is not None]
                s[k] = statistics.median(vals) if vals else None
            last = ok[-1]
            first = ok[0]
            for k in ("json_schema", "json_text"):
                if k in first:
                    s[k] = first[k]
            for k in ("version", "template_from_gguf", "template_matches_chatml", "streaming", "tokenize",
                      "import_s"):
                if k in last:
                    s[k] = last[k]
            s["n_prompt"] = last["call_1"]["n_prompt"]
            s["n_gen"] = last["call_1"]["n_gen"]
            s["text_1"] = last["call_1"]["text"]
            s["same_output_as_" + ref] = (last["call_1"]["text"] == ref_text) if ref_text is not None else None
            s["same_output_all_runs"] = len({r["call_1"]["text"] for r in ok}) == 1
            if "reused" in last:
                s["kv_prefix_reused_tokens"] = last["reused"]
        else:
            s["error"] = runs[n][0].get("error") if runs[n] else "not run"
        if n in wheels and Path(wheels[n]).exists():
            w = Path(wheels[n])
            s["wheel"] = w.name
            s["wheel_mib"] = w.stat().st_size / 2**20
            s["wheel_platform_tag"] = w.stem.split("-")[-1]
        if n in install:
            s["install_s"] = float(install[n])
        if n in preload:
            s["ld_preload"] = preload[n]
        summary[n] = s
    out = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "model": spec["model"], "threads": args.threads,
           "max_tokens": args.max_tokens, "rounds": args.rounds, "reference": ref, "argv": sys.argv,
           "cpu": _cpu(), "summary": summary, "runs": runs}
    print_table(summary, ref)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip() + f" x{os.cpu_count()}"
    except OSError:
        pass
    return ""


def print_table(summary: dict, ref: str) -> None:
    cols = [("load_s", "load s", "{:.2f}"), ("peak_rss_mib", "RSS MiB", "{:.0f}"),
            ("prompt_tok_s", "prompt t/s", "{:.1f}"), ("gen_tok_s", "gen t/s", "{:.2f}"),
            ("ttft_1_s", "ttft1 s", "{:.2f}"), ("ttft_2_s", "ttft2 s", "{:.2f}"),
            ("ttft_2_over_1", "2/1", "{:.2f}"), ("same_output_as_" + ref, "same", "{}"),
            ("template_from_gguf", "tmpl", "{}"), ("json_schema", "json", "{}")]
    print(f"{'binding':<20}" + "".join(f"{h:>11}" for _, h, _ in cols))
    for n, s in summary.items():
        cells = []
        for k, _, f in cols:
            v = s.get(k)
            cells.append(f"{(f.format(v) if v is not None else '-'):>11}")
        print(f"{n:<20}" + "".join(cells) + (f"  {s['error']}" if "error" in s else ""))


if __name__ == "__main__":
    main()
