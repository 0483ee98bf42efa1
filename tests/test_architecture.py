"""The house rules: the core never imports the apps, the framework integrations or the eval harness (STYLE.md rule 7); the README says what
the set-up commands do to the system."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parent.parent
SRC = ROOT / "src" / "funnel"
OUTER = ("funnel.apps", "funnel.eval", "funnel.integrations")
OUTER_DIRS = ("apps", "eval", "integrations")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_core_does_not_import_apps_or_eval():
    core = [p for p in SRC.rglob("*.py") if p.relative_to(SRC).parts[0] not in OUTER_DIRS]
    assert len(core) > 10
    offenders = {
        str(p.relative_to(SRC)): sorted(n for n in _imports(p) if n.startswith(OUTER)) for p in core
    }
    assert {p: n for p, n in offenders.items() if n} == {}


def test_settings_are_read_only_in_apps():
    core = [p for p in SRC.rglob("*.py") if p.relative_to(SRC).parts[0] not in ("apps", "integrations")]
    assert not [str(p) for p in core if "pydantic_settings" in _imports(p)]


def test_what_make_test_does_to_the_system_is_said_next_to_it():
    # `make test` installed Debian's chromium with ~100 recommended packages while the README said
    # "everything is installed from PyPI into .venv" (issue 17, defect 7).
    makefile = (ROOT / "Makefile").read_text()
    installs = [line for line in makefile.replace("\\\n", " ").splitlines() if "apt-get install" in line]
    assert installs and all("--no-install-recommends" in line for line in installs)
    assert "ifeq ($(BROWSER),skip)" in makefile
    readme = (ROOT / "README.md").read_text()
    commands = readme[readme.index("## Two commands on a fresh machine"):readme.index("## Using it")]
    assert "apt-get install --no-install-recommends" in commands and "make test BROWSER=skip" in commands


def test_architecture_md_names_only_paths_that_exist_and_every_package():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"`((?:src|tests)/[\w/.\-]+?\.py)`", text))
    assert len(named) > 10
    assert not [p for p in named if not (ROOT / p).is_file()], "ARCHITECTURE.md names a file that moved"
    tops = {p.name for p in SRC.iterdir() if p.name != "__init__.py" and not p.name.startswith("__")
            and (p.is_dir() or p.suffix == ".py")}
    missing = [t for t in sorted(tops) if f"`{t}/`" not in text and f"`{t}`" not in text and f"{t}/" not in text]
    assert not missing, f"ARCHITECTURE.md's layers leave out {missing}"


# --- issue 30: the checks that keep one engine config and one builder -------------------------------------

MAX_MODULE_LINES = 400
# Which outer package may import which (ARCHITECTURE.md, "Layers"): the integrations build pipelines from the
# apps' settings and factory; the apps run eval (`funnel eval`) and serve MCP (`funnel mcp`). Nothing else.
OUTER_IMPORTS_ALLOWED = {("integrations", "apps"), ("apps", "eval"), ("apps", "integrations")}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path, modules: set[str]) -> set[str]:
    """The funnel modules `path` imports at run time: function-level imports included, those under `if
    TYPE_CHECKING:` left out; `from funnel import analyze` counts as the submodule."""
    tree = ast.parse(path.read_text())
    checking = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            checking.update(id(n) for child in node.body for n in ast.walk(child))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if id(node) in checking:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            submodules = {f"{base}.{a.name}" for a in node.names} & modules
            found.update(submodules)
            if len(submodules) < len(node.names):  # names defined in `base` itself, not only its submodules
                found.add(base)
    return {m for m in found if m in modules}


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in SRC.rglob("*.py")}
    modules = set(paths)
    return {name: _runtime_imports(path, modules) - {name} for name, path in paths.items()}


def test_no_import_cycle_in_src():
    graph = _graph()
    def edges(m):
        return graph[m]

    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert cycles == []


def test_outer_packages_import_each_other_only_as_architecture_md_says():
    found = set()
    for module, targets in _graph().items():
        parts = module.split(".")
        if len(parts) < 2 or parts[1] not in OUTER_DIRS:
            continue
        for target in targets:
            other = target.split(".")
            if len(other) > 1 and other[1] in OUTER_DIRS and other[1] != parts[1]:
                found.add((parts[1], other[1]))
    assert found <= OUTER_IMPORTS_ALLOWED, found - OUTER_IMPORTS_ALLOWED
    text = (ROOT / "ARCHITECTURE.md").read_text()
    for a, b in OUTER_IMPORTS_ALLOWED:
        assert f"`{a}` → `{b}`" in text, f"ARCHITECTURE.md does not say that {a} may import {b}"


def test_no_module_over_400_lines():
    lines = {str(p.relative_to(SRC)): len(p.read_text().splitlines()) for p in SRC.rglob("*.py")}
    long = {path: n for path, n in lines.items() if n > MAX_MODULE_LINES}
    assert long == {}


def test_a_pipeline_is_made_by_pipeline_build_alone():
    """`Pipeline(...)` nowhere (src, tests, bench) but `Pipeline.build`'s own `cls(...)`, and nothing assigns
    a built pipeline's parts."""
    made, mutated = [], []
    for path in [*SRC.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]:
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Pipeline":
                made.append(f"{path.relative_to(ROOT)}:{node.lineno}")
        mutated += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in
                    re.finditer(r"\bpipeline\.(reranker|embedder|generator|store|config)\s*=[^=]", text)]
    assert made == [] and mutated == []
    build = (SRC / "pipeline.py").read_text()
    assert build.count("return cls(") == 1


def _config_defaults() -> dict[str, set]:
    """Every config dataclass field's name -> its default (the one place it may be written)."""
    from dataclasses import MISSING, fields

    from funnel.apps.settings import SECTIONS
    from funnel.engine_config import EngineConfig

    defaults: dict[str, set] = {}
    for dc in {EngineConfig, *(c for classes in SECTIONS.values() for c in classes)}:
        for f in fields(dc):
            if f.default is not MISSING and isinstance(f.default, (int, float, str)):
                defaults.setdefault(f.name, set()).add(f.default)
    return defaults


def test_a_settings_default_is_written_in_its_config_dataclass_alone():
    """A parameter or field named like a setting (`k`, `candidates`, `chunks_per_document`, `rerank_depth`,
    `timeout_s` of the rerank, ...) with the setting's default written as a literal is a second copy of that
    default: it must name the dataclass's (`GroupingConfig.k`) or take None."""
    defaults = _config_defaults()
    config_files = {SRC / "engine_config.py", SRC / "apps" / "settings.py", SRC / "rerank" / "policies.py",
                    SRC / "retrieve" / "first_stage.py"}
    copies = []
    for path in SRC.rglob("*.py"):
        if path in config_files:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            pairs = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                positional = args.posonlyargs + args.args
                pairs += list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
                pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
                pairs = [(a.arg, d) for a, d in pairs]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
                pairs = [(node.target.id, node.value)]
            for name, value in pairs:
                if isinstance(value, ast.Constant) and value.value in defaults.get(name, ()) \
                        and not isinstance(value.value, bool) and value.value is not None:
                    copies.append(f"{path.relative_to(SRC)}:{value.lineno} {name}={value.value!r}")
    assert copies == []
