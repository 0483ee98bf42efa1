"""Tree-sitter splitter for Java, JavaScript, TypeScript (and TSX) and Go: one span per definition.

The `ast` splitter in `code.py` does this for Python; here the per-grammar wheels (`tree-sitter-java`,
...) give the same for the languages most stack traces come from. Every grammar is compiled into its
wheel, so nothing is fetched at run time. Spans cover the whole file: the code between definitions
(imports, package lines, top-level statements) becomes sections too. A missing grammar or a file that
is mostly parse errors gives None, and the caller uses its line heuristic instead.
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tree_sitter import Node, Parser


@dataclass(frozen=True)
class Span:
    """Lines of a file and the symbol they belong to (None: code between definitions)."""

    start: int  # 1-based, inclusive
    end: int
    heading: str | None


def fill_gaps(spans: list[Span], first: int, last: int, heading: str | None) -> list[Span]:
    """The lines between definitions become sections of their own, named by the enclosing scope."""
    out: list[Span] = []
    cursor = first
    for span in spans:
        if span.start > cursor:
            out.append(Span(cursor, span.start - 1, heading))
        out.append(span)
        cursor = span.end + 1
    if cursor <= last:
        out.append(Span(cursor, last, heading))
    return out


# language (as `walk.CODE_LANGUAGES` names it) or grammar -> (grammar module, function giving the grammar)
_GRAMMARS: dict[str, tuple[str, str]] = {
    "java": ("tree_sitter_java", "language"),
    "javascript": ("tree_sitter_javascript", "language"),
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "tsx": ("tree_sitter_typescript", "language_tsx"),
    "go": ("tree_sitter_go", "language"),
}
TREESITTER_LANGUAGES = frozenset({"java", "javascript", "typescript", "go"})

_parsers: dict[str, Parser | None] = {}
# A Parser is not safe to share between threads; parsing is fast enough that one lock costs nothing.
_parse_lock = threading.Lock()


def treesitter_spans(
    text: str, language: str | None, filename: str, class_split_lines: int
) -> list[Span] | None:
    """Definitions and the code between them, covering every line of `text`.

    None when the language has no grammar here, its package is not installed, or parse errors cover
    most of the file (then the tree says little, and the line heuristic does better).
    """
    grammar = "tsx" if language == "typescript" and filename.lower().endswith(".tsx") else language
    family = _FAMILIES.get(grammar or "")
    parser = _parser(grammar) if family is not None else None
    if parser is None:
        return None
    data = text.encode("utf-8", errors="replace")
    with _parse_lock:
        root = parser.parse(data).root_node
    lines = text.split("\n")
    if _mostly_errors(root, lines):
        return None
    walker = _Walker(family, lines, class_split_lines)
    return fill_gaps(walker.definitions(root.named_children, -1, None), 1, len(lines), None)


def _parser(grammar: str) -> Parser | None:
    """Built once per grammar, on first use; None when the packages are missing or do not fit together."""
    if grammar not in _parsers:
        module_name, function = _GRAMMARS[grammar]
        try:
            import tree_sitter

            module = importlib.import_module(module_name)
            parser = tree_sitter.Parser(tree_sitter.Language(getattr(module, function)()))
        # ValueError: a grammar built for a newer ABI than the installed tree-sitter reads.
        except (ImportError, OSError, AttributeError, TypeError, ValueError):
            parser = None
        _parsers[grammar] = parser
    return _parsers[grammar]


def _mostly_errors(root: Node, lines: list[str]) -> bool:
    """Tree-sitter recovers from errors; only top-level ERROR nodes over half the code make it useless."""
    if not root.has_error:
        return False
    if root.type == "ERROR":
        return True
    bad: set[int] = set()
    for child in root.children:
        if child.type == "ERROR":
            bad.update(range(child.start_point.row, child.end_point.row + 1))
    code_rows = {i for i, line in enumerate(lines) if line.strip()}
    return 2 * len(bad & code_rows) > len(code_rows)


@dataclass(frozen=True)
class _Definition:
    first: int  # 0-based rows, inclusive
    last: int
    name: str
    body: Node | None = None  # the members' container, for a class that may be split per method


@dataclass(frozen=True)
class _Family:
    """What a definition looks like in one grammar family."""

    find: Callable[[Node, bool], list[_Definition]]  # (node, is a class member) -> its definitions
    members: Callable[[Node], list[Node]]  # a class body -> its member nodes (comments included)
    comments: frozenset[str]
    decorators: frozenset[str] = frozenset()


# A split class's closing lines hold nothing worth a section of their own.
_CLOSING_LINE = re.compile(r"^\s*[)}\]]*;?\s*$")


class _Walker:
    def __init__(self, family: _Family, lines: list[str], class_split_lines: int):
        self.family = family
        self.lines = lines
        self.class_split_lines = class_split_lines

    def definitions(self, nodes: Iterable[Node], floor: int, owner: str | None) -> list[Span]:
        """Spans of the definitions among sibling nodes, with the comments and decorators right above.

        `floor` is the last row before the siblings (a class body's opening line): a comment that
        starts on it, or on the last row of the sibling before, trails that line and is not attached.
        """
        family = self.family
        spans: list[Span] = []
        lead: int | None = None  # first row of the comments/decorators above the next sibling
        lead_end = -1
        sticky = False  # a decorator is waiting: it belongs to the next sibling even across blank lines
        previous = floor
        cursor = floor + 1  # first row not yet in a definition
        for node in nodes:
            row = node.start_point.row
            if node.type in family.comments or node.type in family.decorators:
                if row > previous:
                    if lead is None or (row > lead_end + 1 and not sticky):
                        lead, sticky = row, False
                    lead_end = max(lead_end, node.end_point.row)
                    sticky = sticky or node.type in family.decorators
                continue
            start = lead if lead is not None and (sticky or lead_end + 1 >= row) else row
            lead, lead_end, sticky = None, -1, False
            previous = max(previous, node.end_point.row)
            for i, found in enumerate(family.find(node, owner is not None)):
                first = max(start if i == 0 else found.first, cursor)
                if found.last < first:  # shares its only line with the definition before
                    continue
                name = f"{owner}.{found.name}" if owner else found.name
                if (
                    owner is None
                    and found.body is not None
                    and found.last - first + 1 > self.class_split_lines
                ):
                    spans.extend(self._split(found, first, name))
                else:
                    spans.append(Span(first + 1, found.last + 1, name))
                cursor = found.last + 1
        return spans

    def _split(self, found: _Definition, first: int, name: str) -> list[Span]:
        """A long class: its header and fields as one section, then one per member."""
        assert found.body is not None
        members = self.definitions(self.family.members(found.body), found.body.start_point.row, name)
        spans = fill_gaps(members, first + 1, found.last + 1, name)
        if len(spans) > 1 and spans[-1].heading == name and spans[-2].heading != name:
            tail = self.lines[spans[-1].start - 1 : spans[-1].end]
            if all(_CLOSING_LINE.match(line) for line in tail):  # a lone "}" is no section
                spans[-2:] = [Span(spans[-2].start, spans[-1].end, spans[-2].heading)]
        return spans


def _text(node: Node | None) -> str:
    return "" if node is None else (node.text or b"").decode("utf-8", errors="replace")


def _whole(node: Node, name: str, body: Node | None = None) -> list[_Definition]:
    return [_Definition(node.start_point.row, node.end_point.row, name, body)] if name else []


# -- Java ---------------------------------------------------------------------------------------------

_JAVA_TYPES = frozenset(
    {
        "class_declaration",
        "interface_declaration",
        "enum_declaration",
        "record_declaration",
        "annotation_type_declaration",
    }
)
_JAVA_METHODS = frozenset(
    {"method_declaration", "constructor_declaration", "compact_constructor_declaration"}
)


def _java_find(node: Node, member: bool) -> list[_Definition]:
    if node.type in _JAVA_TYPES:
        return _whole(node, _text(node.child_by_field_name("name")), node.child_by_field_name("body"))
    if node.type in _JAVA_METHODS:
        return _whole(node, _text(node.child_by_field_name("name")))
    return []


def _java_members(body: Node) -> list[Node]:
    """An enum's methods sit one level down, after its constants."""
    out: list[Node] = []
    for child in body.named_children:
        out.extend(child.named_children if child.type == "enum_body_declarations" else [child])
    return out


# -- JavaScript and TypeScript ------------------------------------------------------------------------

_JS_CLASSES = frozenset({"class_declaration", "abstract_class_declaration", "class", "interface_declaration"})
_JS_NAMED = frozenset(
    {
        "function_declaration",
        "generator_function_declaration",
        "function_signature",
        "type_alias_declaration",
        "enum_declaration",
        "internal_module",
        "module",
    }
)
_JS_FUNCTION_VALUES = frozenset(
    {"arrow_function", "function_expression", "function", "generator_function", "class"}
)
_JS_METHODS = frozenset({"method_definition", "method_signature", "abstract_method_signature"})
_JS_FIELDS = frozenset({"field_definition", "public_field_definition"})


def _js_find(node: Node, member: bool) -> list[_Definition]:
    return _js_member(node) if member else _js_top_level(node)


def _js_top_level(node: Node) -> list[_Definition]:
    kind = node.type
    if kind == "export_statement":
        declaration = node.child_by_field_name("declaration")
        if declaration is not None:
            return _retarget(_js_top_level(declaration), node)
        value = node.child_by_field_name("value")  # export default <expression>
        if value is not None and _js_defines(value):
            return _whole(node, _text(value.child_by_field_name("name")) or "default", _class_body(value))
        return []
    if kind in ("ambient_declaration", "expression_statement") and node.named_child_count == 1:
        inner = node.named_children[0]  # `declare class X {}`; a namespace; `exports.find = function ...`
        if inner.type == "assignment_expression":
            right = inner.child_by_field_name("right")
            if not _js_defines(right):
                return []
            assert right is not None
            name = _js_assigned_name(_text(inner.child_by_field_name("left")))
            return _whole(
                node, name or _text(right.child_by_field_name("name")) or "module.exports", _class_body(right)
            )
        return _retarget(_js_top_level(inner), node)
    if kind in _JS_CLASSES:
        return _whole(node, _text(node.child_by_field_name("name")), node.child_by_field_name("body"))
    if kind in _JS_NAMED:
        return _whole(node, _text(node.child_by_field_name("name")).strip("\"'`"))
    if kind in ("lexical_declaration", "variable_declaration"):
        for declarator in node.named_children:
            value = declarator.child_by_field_name("value")
            if declarator.type == "variable_declarator" and _js_defines(value):
                assert value is not None
                return _whole(node, _text(declarator.child_by_field_name("name")), _class_body(value))
    return []


def _js_member(node: Node) -> list[_Definition]:
    if node.type in _JS_METHODS:
        return _whole(node, _text(node.child_by_field_name("name")))
    if node.type in _JS_FIELDS and _js_defines(node.child_by_field_name("value")):  # handle = () => ...
        name = node.child_by_field_name("property") or node.child_by_field_name("name")
        return _whole(node, _text(name))
    return []


def _js_defines(value: Node | None) -> bool:
    """A function or class value, or one passed to a call: `export const get = wrap(async (req) => ...)`."""
    if value is None:
        return False
    if value.type in _JS_FUNCTION_VALUES:
        return True
    if value.type == "call_expression":
        arguments = value.child_by_field_name("arguments")
        return arguments is not None and any(a.type in _JS_FUNCTION_VALUES for a in arguments.named_children)
    return False


def _js_assigned_name(target: str) -> str:
    """`module.exports.find` reads as `find`, `Foo.prototype.bar` as `Foo.bar`, as a stack trace shows them.

    Empty for `module.exports = ...` itself: the value's own name says more.
    """
    target = re.sub(r"^(module\.)?exports\.", "", target).replace(".prototype.", ".")
    return "" if target in ("module.exports", "exports") else target


def _class_body(value: Node) -> Node | None:
    """`const Foo = class { ... }` may be split per method like a class declaration."""
    return value.child_by_field_name("body") if value.type == "class" else None


def _retarget(found: list[_Definition], outer: Node) -> list[_Definition]:
    """The wrapper (`export`, `declare`, and the decorators before them) belongs to what it wraps."""
    return [_Definition(outer.start_point.row, outer.end_point.row, d.name, d.body) for d in found[:1]]


# -- Go -----------------------------------------------------------------------------------------------


def _go_find(node: Node, member: bool) -> list[_Definition]:
    if node.type == "function_declaration":
        return _whole(node, _text(node.child_by_field_name("name")))
    if node.type == "method_declaration":
        receiver = node.child_by_field_name("receiver")
        parameter = receiver.named_children[0] if receiver is not None and receiver.named_children else None
        receiver_type = _text(parameter.child_by_field_name("type") if parameter is not None else None)
        type_name = receiver_type.lstrip("*( ").split("[")[0].rstrip(") ")  # *Repo[T] -> Repo
        name = _text(node.child_by_field_name("name"))
        return _whole(node, f"{type_name}.{name}" if type_name else name)
    if node.type == "type_declaration":
        return _go_types(node)
    return []


def _go_types(node: Node) -> list[_Definition]:
    """`type ( A ...; B ... )` is one span per type; the lines between two go with the one that follows."""
    specs = [c for c in node.named_children if c.type in ("type_spec", "type_alias")]
    found = []
    for i, spec in enumerate(specs):
        first = node.start_point.row if i == 0 else specs[i - 1].end_point.row + 1
        last = node.end_point.row if i == len(specs) - 1 else spec.end_point.row
        name = _text(spec.child_by_field_name("name"))
        if name:
            found.append(_Definition(first, last, name))
    return found


_FAMILIES: dict[str, _Family] = {
    "java": _Family(_java_find, _java_members, frozenset({"line_comment", "block_comment"})),
    "go": _Family(_go_find, lambda body: [], frozenset({"comment"})),
    **{
        grammar: _Family(
            _js_find, lambda body: body.named_children, frozenset({"comment"}), frozenset({"decorator"})
        )
        for grammar in ("javascript", "typescript", "tsx")
    },
}
