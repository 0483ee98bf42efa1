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


def _runtime_imports(path: Path, modules: set[str], typing: bool = False) -> set[str]:
    """The funnel modules `path` imports at run time: function-level imports included, those under `if
    TYPE_CHECKING:` left out unless `typing`; `from funnel import analyze` counts as the submodule."""
    tree = ast.parse(path.read_text())
    checking = set()
    for node in ast.walk(tree):
        if not typing and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
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


def _graph(typing: bool = False) -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in SRC.rglob("*.py")}
    modules = set(paths)
    return {name: _runtime_imports(path, modules, typing) - {name} for name, path in paths.items()}


def test_no_import_cycle_in_src():
    """No module imports itself back through others, counting the imports made for types alone under `if
    TYPE_CHECKING:` (issue 41: calibrate ↔ pipeline and library ↔ watched were loops only those hid)."""
    graph = _graph(typing=True)
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


# --- issue 41: the service half's floor: cli → api, triage → state → the core ----------------------------

STATE = SRC / "apps" / "state"
# Where the console script starts (`funnel = funnel.apps.main:run`): it alone, outside the CLI, imports it.
CLI_ENTRY = "funnel.apps.main"


def _every_funnel_import(path: Path, modules: set[str]) -> set[str]:
    """Every funnel module `path` imports: at the top, in functions and under `if TYPE_CHECKING:` alike
    (a type the floor names is one it depends on); relative imports resolved; `from funnel.apps.state import
    db` counts as the submodule."""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "funnel")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            if base.split(".")[0] != "funnel":
                continue
            submodules = {f"{base}.{a.name}" for a in node.names} & modules
            found.update(submodules)
            if len(submodules) < len(node.names):
                found.add(base)
    return found


def _part(module: str) -> str:
    """`apps.<x>` for a module of the apps (`apps.state`, `apps.settings`), `eval`, `integrations`, or `core`."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "apps":
        return f"apps.{parts[2]}"
    return parts[1] if len(parts) > 1 and parts[1] in ("eval", "integrations") else "core"


def _apps_edges() -> dict[tuple[str, str], set[str]]:
    """(part, part it imports) -> the imports that make the edge, for every module of the apps."""
    paths = {_module_name(p): p for p in SRC.rglob("*.py")}
    edges: dict[tuple[str, str], set[str]] = {}
    for name, path in paths.items():
        if _part(name).startswith("apps."):
            for target in _every_funnel_import(path, set(paths)):
                if _part(target) != _part(name):
                    edges.setdefault((_part(name), _part(target)), set()).add(f"{name} -> {target}")
    return edges


def test_the_state_imports_only_the_core_and_itself():
    """`apps/state` is the floor of the service: it imports the core (`funnel.*` outside the apps, eval and
    the integrations) and its own modules, nothing of the HTTP API, triage, the CLI, the settings or the
    integrations: not at the top, not in a function, not for a type under `if TYPE_CHECKING:`."""
    modules = {_module_name(p) for p in SRC.rglob("*.py")}
    state = sorted(STATE.rglob("*.py"))
    assert len(state) > 10
    offenders = {}
    for path in state:
        wrong = sorted(m for m in _every_funnel_import(path, modules)
                       if m.startswith(OUTER) and not m.startswith("funnel.apps.state"))
        if wrong:
            offenders[str(path.relative_to(SRC))] = wrong
    assert offenders == {}


def test_the_apps_import_downwards():
    """api → state → core and triage → state → core (triage imports neither the HTTP API nor the CLI); the
    API does not import the CLI; nothing but the CLI itself and the console script's entry point imports the
    CLI; and no two parts of the apps import each other, however indirectly (TYPE_CHECKING imports count)."""
    edges = _apps_edges()
    assert ("apps.api", "apps.state") in edges and ("apps.triage", "apps.state") in edges
    forbidden = {("apps.triage", "apps.api"), ("apps.triage", "apps.cli"), ("apps.api", "apps.cli")}
    forbidden |= {(a, b) for a, b in edges if a == "apps.state" and b != "core"}
    assert {edge: sorted(edges[edge]) for edge in forbidden & set(edges)} == {}
    into_cli = {i for (a, b), found in edges.items() if b == "apps.cli" for i in found}
    assert {i for i in into_cli if not i.startswith(f"{CLI_ENTRY} -> ")} == set()
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in graph.get(start, ()))

    loops = sorted(a for a in graph if reaches(a, a, set()))
    assert loops == [], f"parts of the apps that import themselves back: {loops}"


# --- issue 41: the environment is read by the settings alone ------------------------------------------------

# Modules outside the apps that may touch os.environ, each with why it is not a setting.
ENVIRONMENT_NOT_A_SETTING = {
    # Tesseract's subprocess gets the process's environment plus OMP_THREAD_LIMIT=1 (one thread per page,
    # the pages run in parallel): it passes the environment on, it reads nothing from it.
    "ingest/ocr.py",
}


def _reads_environment(path: Path) -> list[int]:
    """Lines of `path` that touch the environment: os.environ, os.environb, os.getenv, os.putenv, or those
    names imported from os."""
    names = {"environ", "environb", "getenv", "putenv"}
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr in names and isinstance(node.value, ast.Name) \
                and node.value.id == "os":
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os" and names & {a.name for a in node.names}:
            lines.append(node.lineno)
    return lines


def test_only_the_settings_read_the_environment():
    """FUNNEL_MODEL_DIR, FUNNEL_E5_MODEL_DIR, FUNNEL_RERANKER_DIR and FUNNEL_EVAL_CACHE were read where they
    were used; they are settings now ([models], [eval]), read in `funnel.apps.settings` and passed down.
    Outside `apps/` nothing reads the environment but the exceptions named above."""
    outside = [p for p in SRC.rglob("*.py") if p.relative_to(SRC).parts[0] != "apps"]
    assert len(outside) > 10
    found = {str(p.relative_to(SRC)): _reads_environment(p) for p in outside}
    assert {p: lines for p, lines in found.items() if lines and p not in ENVIRONMENT_NOT_A_SETTING} == {}
    assert all(found[p] for p in ENVIRONMENT_NOT_A_SETTING), "an exception that no longer reads it: drop it"
