"""Source-code loader: one CODE section per top-level definition, named by its symbol.

A stack trace names functions, and a person triaging an error thinks in them, so the unit of code
retrieval is a definition ("UserService.get_user"), not a window of lines. Python is parsed with `ast`;
Java, JavaScript, TypeScript and Go with tree-sitter (`code_treesitter`); other languages, and files that
do not parse, use a line heuristic that is right often enough.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from funnel.ingest.code_treesitter import TREESITTER_LANGUAGES, Span, fill_gaps, treesitter_spans
from funnel.ingest.text import file_document, read_source
from funnel.types import Kind, LoadedDocument, Section, SectionKind

# Extension -> language. Config formats count as code: in a repository they are part of what breaks.
CODE_LANGUAGES: dict[str, str] = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript",
    ".cjs": "javascript", ".jsx": "javascript", ".ts": "typescript", ".tsx": "typescript",
    ".java": "java", ".go": "go", ".rs": "rust", ".c": "c", ".h": "c", ".cpp": "cpp",
    ".cc": "cpp", ".cxx": "cpp", ".hpp": "cpp", ".hh": "cpp", ".cs": "csharp", ".rb": "ruby",
    ".php": "php", ".kt": "kotlin", ".kts": "kotlin", ".scala": "scala", ".swift": "swift",
    ".sh": "shell", ".bash": "shell", ".zsh": "shell", ".sql": "sql", ".lua": "lua",
    ".pl": "perl", ".r": "r", ".dart": "dart", ".m": "objective-c", ".vue": "vue",
    ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".ini": "ini", ".cfg": "ini",
}
CODE_FILENAMES: dict[str, str] = {"Dockerfile": "dockerfile", "Makefile": "make"}

# A class longer than this is split per method. Code runs at about ten tokens a line, so this is
# roughly what fits one 256-token embedding window; a method is also what a stack trace names.
CLASS_SPLIT_LINES = 25
# Without recognisable definitions, blank-line blocks are merged up to this many lines.
BLOCK_MAX_LINES = 40
# Deeper than this, a "definition" is a nested helper or a statement that happens to look like one.
_MAX_DEF_INDENT = 4

_COMMENT_OR_ANNOTATION = re.compile(r"^\s*(#|//|/\*|\*|--|@)")
_CONTAINER_KEYWORDS = frozenset(
    {"class", "interface", "struct", "enum", "trait", "impl", "object", "record", "module", "namespace",
     "protocol", "extension"}
)
_NOT_A_TYPE = frozenset(
    {"return", "new", "else", "throw", "await", "yield", "case", "goto", "delete", "echo"}
)
_NOT_A_NAME = frozenset(
    {"if", "for", "while", "switch", "catch", "sizeof", "return", "foreach", "elif", "using"}
)

_DEFINITION_PATTERNS = [
    re.compile(
        r"^(?P<indent>[ \t]*)(?:export\s+)?(?:default\s+)?(?:async\s+)?function\s*\*?\s*(?P<name>[\w$]+)"
    ),
    re.compile(
        r"^(?P<indent>[ \t]*)(?:(?:public|private|protected|internal|static|final|abstract|sealed|open|data|"
        r"export|default|declare|partial|async|pub(?:\([\w:]+\))?)\s+)*"
        r"(?P<keyword>class|interface|struct|enum|trait|impl|object|record|module|namespace|protocol|"
        r"extension)"
        r"\s+(?P<name>[\w$.:]+)"
    ),
    re.compile(r"^(?P<indent>[ \t]*)func\s+(?:\(\s*\w*\s*\*?(?P<receiver>\w+)[^)]*\)\s*)?(?P<name>\w+)"),
    re.compile(
        r"^(?P<indent>[ \t]*)(?:pub(?:\([\w:]+\))?\s+)?(?:async\s+)?(?:unsafe\s+)?(?:const\s+)?"
        r"fn\s+(?P<name>\w+)"
    ),
    re.compile(
        r"^(?P<indent>[ \t]*)(?:(?:private|public|protected|override|suspend|inline|static|async)\s+)*"
        r"(?:def|fun|sub)\s+(?P<name>[\w.?!]+)"
    ),
    re.compile(
        r"^(?P<indent>[ \t]*)(?:export\s+)?(?:const|let|var)\s+(?P<name>[\w$]+)\s*(?::[^=]+)?="
        r"\s*(?:async\s+)?"
        r"(?:function\b|\([^)]*\)\s*(?::\s*[^=]+)?=>|[\w$]+\s*=>)"
    ),
    re.compile(r"^(?P<indent>[ \t]*)(?:function\s+)?(?P<name>[\w-]+)\s*\(\)\s*\{"),
    re.compile(
        r"^(?P<indent>\s*)create\s+(?:or\s+replace\s+)?(?:temp(?:orary)?\s+)?(?:materialized\s+)?"
        r"(?:table|view|function|procedure|index|trigger)\s+(?:if\s+not\s+exists\s+)?(?P<name>[\w.\"`]+)",
        re.IGNORECASE,
    ),
    # C-family functions and methods: a type, a name, an open parenthesis, and no ";" (not a call).
    re.compile(
        r"^(?P<indent>[ \t]*)(?:(?:public|private|protected|internal|static|final|abstract|virtual|override|"
        r"async|extern|inline|const|unsafe|synchronized|native)\s+)*"
        r"(?P<type>[\w<>\[\],.*&:?]+)(?:\s+|\s*[*&]\s*)"
        r"(?P<name>[A-Za-z_]\w*)\s*\([^;]*$"
    ),
]


def load_code(path: Path, doc_id: str, display_path: str, language: str | None = None) -> LoadedDocument:
    raw, text = read_source(path, display_path)
    language = language or CODE_LANGUAGES.get(path.suffix.lower()) or CODE_FILENAMES.get(path.name)
    lines = text.split("\n")
    spans = None
    if language == "python":
        spans = python_spans(text, lines)
    elif language in TREESITTER_LANGUAGES:
        spans = treesitter_spans(text, language, path.name, CLASS_SPLIT_LINES)
    if spans is None:
        spans = heuristic_spans(lines)
    sections = []
    for span in spans:
        start, end = _trim(lines, span.start, span.end)
        if start <= end:
            sections.append(
                Section(
                    text="\n".join(lines[start - 1 : end]),
                    kind=SectionKind.CODE,
                    line_start=start,
                    line_end=end,
                    heading=span.heading,
                )
            )
    document = file_document(doc_id, display_path, Kind.CODE, raw, language)
    return LoadedDocument(document=document, sections=tuple(sections))


def python_spans(text: str, lines: list[str]) -> list[Span] | None:
    """Definitions and the module-level code between them; None when the file does not parse."""
    try:
        tree = ast.parse(text)
    # A long chain like `x = 1 + 1 + ...` parses but overflows the AST builder's recursion limit;
    # generated files of that shape are real, and the heuristic splitter handles them.
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return fill_gaps(_python_definitions(tree.body, lines, 1, None), 1, len(lines), None)


def heuristic_spans(lines: list[str]) -> list[Span]:
    """Sections that start at lines which look like definitions; blank-line blocks when none do."""
    starts: list[tuple[int, str]] = []  # (1-based line, symbol)
    containers: list[tuple[int, str]] = []  # (indent, name) of enclosing classes/namespaces
    for number, line in enumerate(lines, start=1):
        found = _match_definition(line)
        if found is None:
            continue
        indent, name, is_container = found
        while containers and containers[-1][0] >= indent:
            containers.pop()
        symbol = ".".join([c for _, c in containers] + [name])
        if is_container:
            containers.append((indent, name))
        starts.append((number, symbol))
    if not starts:
        return _blank_line_blocks(lines)
    spans: list[Span] = []
    floor = 1
    adjusted = []
    for number, symbol in starts:
        adjusted.append((_extend_over_comments(lines, number, floor), symbol))
        floor = number + 1
    if adjusted[0][0] > 1:
        spans.append(Span(1, adjusted[0][0] - 1, None))
    for i, (start, symbol) in enumerate(adjusted):
        end = adjusted[i + 1][0] - 1 if i + 1 < len(adjusted) else len(lines)
        spans.append(Span(start, end, symbol))
    return spans


def _python_definitions(body: list[ast.stmt], lines: list[str], floor: int, owner: str | None) -> list[Span]:
    spans: list[Span] = []
    for node in body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        start = _extend_over_comments(lines, start, floor)
        end = node.end_lineno or node.lineno
        name = f"{owner}.{node.name}" if owner else node.name
        if owner is None and isinstance(node, ast.ClassDef) and end - start + 1 > CLASS_SPLIT_LINES:
            members = _python_definitions(node.body, lines, start + 1, name)
            spans.extend(fill_gaps(members, start, end, name))
        else:
            spans.append(Span(start, end, name))
        floor = end + 1
    return spans


def _extend_over_comments(lines: list[str], start: int, floor: int) -> int:
    """Comments, doc comments and annotations right above a definition belong to it."""
    while start - 1 >= floor and _COMMENT_OR_ANNOTATION.match(lines[start - 2]):
        start -= 1
    return start


def _match_definition(line: str) -> tuple[int, str, bool] | None:
    for pattern in _DEFINITION_PATTERNS:
        m = pattern.match(line)
        if m is None:
            continue
        indent = len(m.group("indent").expandtabs(4))
        if indent > _MAX_DEF_INDENT:
            return None
        groups = m.groupdict()
        name = re.split(r"[<(:{\s]", groups["name"].strip("\"`"))[0]
        if not name or name in _NOT_A_NAME or (groups.get("type") or "") in _NOT_A_TYPE:
            continue
        if groups.get("receiver"):  # a Go method reads best as Type.Method, like a stack trace shows it
            name = f"{groups['receiver']}.{name}"
        return indent, name, groups.get("keyword") in _CONTAINER_KEYWORDS
    return None


def _blank_line_blocks(lines: list[str]) -> list[Span]:
    spans: list[Span] = []
    start: int | None = None
    for number, line in enumerate(lines, start=1):
        if start is None:
            if line.strip():
                start = number
            continue
        too_long = number - start >= BLOCK_MAX_LINES
        if too_long or (not line.strip() and number - start >= BLOCK_MAX_LINES // 2):
            spans.append(Span(start, number - 1, None))
            start = number if line.strip() else None
    if start is not None:
        spans.append(Span(start, len(lines), None))
    return spans


def _trim(lines: list[str], start: int, end: int) -> tuple[int, int]:
    while start <= end and not lines[start - 1].strip():
        start += 1
    while end >= start and not lines[end - 1].strip():
        end -= 1
    return start, end
