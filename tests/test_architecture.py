"""The core never imports the apps or the eval harness (STYLE.md rule 7)."""

import ast
from pathlib import Path

SRC = Path(__file__).parent.parent / "src" / "funnel"
OUTER = ("funnel.apps", "funnel.eval")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_core_does_not_import_apps_or_eval():
    core = [p for p in SRC.rglob("*.py") if p.relative_to(SRC).parts[0] not in ("apps", "eval")]
    assert len(core) > 10
    offenders = {
        str(p.relative_to(SRC)): sorted(n for n in _imports(p) if n.startswith(OUTER)) for p in core
    }
    assert {p: n for p, n in offenders.items() if n} == {}


def test_settings_are_read_only_in_apps():
    core = [p for p in SRC.rglob("*.py") if p.relative_to(SRC).parts[0] != "apps"]
    assert not [str(p) for p in core if "pydantic_settings" in _imports(p)]
