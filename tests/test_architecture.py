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
