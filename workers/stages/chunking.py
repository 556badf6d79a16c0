"""Cut source text into chunks that follow the syntax tree (the cAST approach).

Structure first, size second: every top-level node is a candidate chunk; a node larger than
``max_chars`` is cut at its children (a class becomes its methods, a long function its
statements, a big config key its keys), and small neighbours are merged again up to
``max_chars``. Pure: plain text in, plain data out; no I/O.

Lines: chunks are whole lines and together cover every line exactly once, in order. Lines
between nodes (comments, decorators, attributes, blank lines) go with the next node, lines after
the last node with the last one; only a gap longer than ``max_chars / 2`` that would push its
node over budget is cut into chunks of its own. A chunk is longer than ``max_chars`` only when
it is a single line. Text with no grammar, over 4 MB, or minified (average line over 1,000
chars) is cut into greedy line windows.

Chunk types:
- ``function`` / ``method``: ``method`` when the function sits in a class-like body (class,
  struct, impl, trait, interface, Ruby module) or names its owner (Go receiver, C++ ``A::f``).
- ``class``: class, struct, enum, interface, trait, impl, Go type declaration, C typedef struct.
- ``module``: grouped top-level statements (imports, constants, config keys), or a namespace
  (C++/C# ``namespace``, Rust ``mod``, Ruby ``module``).
- ``block``: a piece of a definition's body that was too big to keep whole (``name`` is the
  definition, ``parent_name`` its parent), or a merged group of definitions of different types.
- ``section``: Markdown, a heading with its text (``name`` is the heading, ``parent_name`` the
  enclosing heading).
- ``lines``: a fixed window of lines, for text with no usable grammar.

Merging: neighbouring plain statements merge freely up to ``max_chars``; a definition merges
with a neighbour only when one of the two is smaller than ``min_chars``. A merged group is typed
by its definitions when they make up at least half of its characters (their type if they agree,
else ``block``) and named after the first; otherwise it is plain statements (``module`` at top
level, ``block`` inside a definition). Config groups are named after their first key, with the
key they sit in as ``parent_name``.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from itertools import accumulate

from tree_sitter import Language, Node, Parser, Tree
from tree_sitter_language_pack import get_language

__all__ = ["Chunk", "chunk_text", "language_for_path", "parse", "parser_for"]


@dataclass(frozen=True, slots=True)
class Chunk:
    start_line: int  # 1-based, inclusive
    end_line: int  # 1-based, inclusive
    content: str  # exactly the text of lines start_line..end_line
    chunk_type: str
    name: str | None
    parent_name: str | None


# --- languages --------------------------------------------------------------------------------

_EXTENSIONS: dict[str, str] = {
    **dict.fromkeys(("py", "pyi", "pyw"), "python"),
    **dict.fromkeys(("js", "mjs", "cjs", "jsx"), "javascript"),
    **dict.fromkeys(("ts", "mts", "cts"), "typescript"),
    "tsx": "tsx",
    "go": "go",
    "rs": "rust",
    "java": "java",
    **dict.fromkeys(("c", "h"), "c"),
    **dict.fromkeys(("cc", "cpp", "cxx", "c++", "hpp", "hh", "hxx", "h++", "ipp", "inl"), "cpp"),
    "cu": "cuda",
    **dict.fromkeys(("rb", "rake", "gemspec", "ru"), "ruby"),
    **dict.fromkeys(("sh", "bash", "zsh", "ksh", "bats"), "bash"),
    "fish": "fish",
    **dict.fromkeys(("md", "markdown", "mdown", "mkd"), "markdown"),
    **dict.fromkeys(("json", "jsonc", "json5", "ipynb"), "json"),
    **dict.fromkeys(("yaml", "yml"), "yaml"),
    "toml": "toml",
    **dict.fromkeys(("kt", "kts"), "kotlin"),
    "cs": "csharp",
    "php": "php",
    **dict.fromkeys(("scala", "sc"), "scala"),
    "swift": "swift",
    "lua": "lua",
    **dict.fromkeys(("html", "htm"), "html"),
    "css": "css",
    "scss": "scss",
    "sql": "sql",
    "hs": "haskell",
    **dict.fromkeys(("ex", "exs"), "elixir"),
    "erl": "erlang",
    "zig": "zig",
    **dict.fromkeys(("tf", "tfvars"), "terraform"),
    "hcl": "hcl",
    **dict.fromkeys(("pl", "pm"), "perl"),
    "r": "r",
    "dart": "dart",
    "jl": "julia",
    **dict.fromkeys(("ml",), "ocaml"),
    "mli": "ocaml_interface",
    **dict.fromkeys(("clj", "cljs", "cljc", "edn"), "clojure"),
    "el": "elisp",
    "nix": "nix",
    **dict.fromkeys(("ps1", "psm1"), "powershell"),
    **dict.fromkeys(("groovy", "gradle"), "groovy"),
    "cmake": "cmake",
    **dict.fromkeys(("mk", "mak"), "make"),
    "dockerfile": "dockerfile",
    "proto": "proto",
    "vue": "vue",
    "svelte": "svelte",
    "xml": "xml",
    "ini": "ini",
    **dict.fromkeys(("bzl", "star"), "starlark"),
    "graphql": "graphql",
    "rst": "rst",
    "tex": "latex",
}

_FILENAMES: dict[str, str] = {
    "dockerfile": "dockerfile",
    "containerfile": "dockerfile",
    "makefile": "make",
    "gnumakefile": "make",
    "cmakelists.txt": "cmake",
    **dict.fromkeys(
        ("gemfile", "rakefile", "vagrantfile", "podfile", "brewfile", "guardfile"), "ruby"
    ),
    **dict.fromkeys(
        (".bashrc", ".bash_profile", ".bash_logout", ".profile", ".zshrc", ".zprofile", "pkgbuild"),
        "bash",
    ),
    **dict.fromkeys(("build", "build.bazel", "workspace", "tiltfile"), "starlark"),
    "jenkinsfile": "groovy",
}


def language_for_path(path: str) -> str | None:
    """tree-sitter-language-pack name for a file, by well-known name or extension."""
    base = os.path.basename(path).lower()
    if base in _FILENAMES:
        return _FILENAMES[base]
    if base.startswith(("dockerfile.", "containerfile.")):
        return "dockerfile"
    stem, dot, ext = base.rpartition(".")
    return _EXTENSIONS.get(ext) if dot and stem else None


@functools.cache
def _language(name: str) -> Language | None:
    try:
        return get_language(name)  # type: ignore[arg-type]
    except (LookupError, ValueError):
        return None


def _parser(name: str) -> Parser | None:
    # A fresh parser per call: parsers are cheap, and one shared across threads is not safe.
    language = _language(name)
    return Parser(language) if language is not None else None


parser_for = _parser  # the code graph (workers/stages/codegraph) parses with the same grammars


def parse(text: str, language: str) -> Tree | None:
    """The syntax tree of `text`; None for a language without a grammar. One parse serves the
    chunker and the code graph (workers/stages/codegraph) of a file."""
    parser = _parser(language)
    return parser.parse(text.encode("utf-8", "replace")) if parser else None  # lone surrogates: "?"


# --- node tables --------------------------------------------------------------------------------

# Functions; "method" when inside a class-like body.
_FUNCTIONS = frozenset(
    {
        "function_definition",  # python, c, c++, bash
        "function_declaration",  # js/ts, go, kotlin, swift
        "generator_function_declaration",
        "function_item",  # rust
        "method",  # ruby
        "singleton_method",
        "method_declaration",  # go (receiver), java, c#
        "constructor_declaration",
        "function_signature_item",
        "macro_definition",
    }
)
_METHODS = frozenset({"method_definition"})  # js/ts class members
# Class-like: functions directly inside them are methods.
_CLASSES = frozenset(
    {
        "class_definition",
        "class_declaration",
        "abstract_class_declaration",
        "class",
        "interface_declaration",
        "enum_declaration",
        "record_declaration",
        "annotation_type_declaration",
        "object_declaration",
        "impl_item",
        "trait_item",
        "struct_item",
        "enum_item",
        "union_item",
        "class_specifier",
        "struct_specifier",
        "union_specifier",
        "enum_specifier",
        "type_declaration",
        "type_definition",
        "singleton_class",
    }
)
# Namespaces: a name for what is inside, but functions there stay functions.
_NAMESPACES = frozenset(
    {
        "namespace_definition",  # c++, php
        "namespace_declaration",  # c#
        "file_scoped_namespace_declaration",
        "mod_item",  # rust
        "internal_module",  # typescript
    }
)
_RUBY_MODULE = "module"
# Nodes that only decorate the definition they wrap: (type, field holding the definition).
_WRAPPERS: dict[str, str | None] = {
    "decorated_definition": "definition",
    "export_statement": "declaration",
    "template_declaration": None,
    "ambient_declaration": None,
    "expression_statement": None,  # only around a TS namespace, see _unwrap
}
_FUNCTION_VALUES = frozenset(
    {"arrow_function", "function_expression", "function", "generator_function"}
)
_VARIABLE_DECLARATIONS = frozenset({"lexical_declaration", "variable_declaration"})
_FIELD_DEFINITIONS = frozenset({"field_definition", "public_field_definition"})
_C_NAMES = frozenset(
    {"identifier", "field_identifier", "qualified_identifier", "destructor_name", "operator_name"}
)
# Leading trivia: attached to the next unit like blank lines, never a unit of its own.
_TRIVIA = frozenset({"attribute_item", "inner_attribute_item"})
_CONFIG_LANGUAGES = frozenset({"json", "yaml", "toml"})
_CONFIG_KEYED = frozenset({"pair", "block_mapping_pair", "table", "table_array_element"})
_BODY_FIELDS = ("body", "value")
_TYPE_NAMES = frozenset({"type_identifier"})
_VALUE_NAMES = frozenset({"identifier", "constant"})
_NAME_TYPES = frozenset({"identifier", "type_identifier", "simple_identifier", "constant", "name"})

_MAX_DEPTH = 48  # deeper nesting is cut into line windows instead of recursing
_MAX_PARSE_CHARS = 4_000_000
_MAX_AVERAGE_LINE = 1_000  # minified or data: line windows are as good and far cheaper
_MAX_NAME = 200


# --- line arithmetic ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Lines:
    text: str
    offsets: list[int]  # offsets[i] = start of line i; offsets[-1] = len(text)
    max_chars: int
    min_chars: int

    @property
    def count(self) -> int:
        return len(self.offsets) - 1

    def size(self, lo: int, hi: int) -> int:
        return self.offsets[hi + 1] - self.offsets[lo]

    def content(self, lo: int, hi: int) -> str:
        return self.text[self.offsets[lo] : self.offsets[hi + 1]]


def _line_offsets(text: str) -> list[int]:
    # tree-sitter counts rows by "\n" only, so lines must too (not str.splitlines).
    parts = text.split("\n")
    if parts[-1] == "":
        parts.pop()
    offsets = [0, *accumulate(len(p) + 1 for p in parts)]
    offsets[-1] = len(text)  # the last line may lack its newline
    return offsets


def _windows(lines: _Lines, lo: int, hi: int) -> Iterator[tuple[int, int]]:
    """Greedy runs of whole lines up to max_chars; an over-long line is a run of its own."""
    start = lo
    for i in range(lo + 1, hi + 1):
        if lines.size(start, i) > lines.max_chars:
            yield start, i - 1
            start = i
    yield start, hi


# --- syntax nodes ---------------------------------------------------------------------------


def _start_row(node: Node) -> int:
    return node.start_point.row


def _end_row(node: Node) -> int:
    # A node that ends with its newline ends at column 0 of the next row.
    row, column = node.end_point
    return row - 1 if column == 0 and row > node.start_point.row else row


def _is_trivia(node: Node) -> bool:
    return not node.is_named or "comment" in node.type or node.type in _TRIVIA


def _units(node: Node) -> list[Node]:
    return [c for c in node.children if not _is_trivia(c)]


def _text(node: Node | None) -> str | None:
    if node is None:
        return None
    raw = node.text or b""
    text = " ".join(raw[: _MAX_NAME * 4].decode("utf-8", "replace").split())
    return text[:_MAX_NAME] or None


def _field(node: Node, name: str) -> Node | None:
    return node.child_by_field_name(name)


def _first_named(node: Node) -> Node | None:
    # not named_children[0]: that builds the list of all children first
    return node.named_child(0) if node.named_child_count else None


def _first_of_type(node: Node, types: frozenset[str], budget: int = 64) -> Node | None:
    """Breadth-first search for a descendant, bounded so odd trees stay cheap."""
    queue = [node]
    for current in queue:
        if current.type in types:
            return current
        if len(queue) > budget:
            break
        # named_child(i), not named_children: a minified line can have a million children
        count = min(current.named_child_count, budget)
        queue.extend(child for i in range(count) if (child := current.named_child(i)))
    return None


def _type_name(node: Node | None) -> str | None:
    """`Foo` from `*Foo`, `Foo<T>`, `crate::Foo`, `&'a Foo`."""
    if node is None:
        return None
    found = _first_of_type(node, _TYPE_NAMES) or _first_of_type(node, _VALUE_NAMES)
    return _text(found)


def _name_of(node: Node) -> str | None:
    """The `name` field, else a leading identifier (grammars without the field: Kotlin)."""
    name = _field(node, "name")
    if name is not None:
        return _text(name)
    for i in range(min(node.named_child_count, 4)):
        child = node.named_child(i)
        if child is not None and child.type in _NAME_TYPES:
            return _text(child)
    return None


def _c_name(node: Node) -> tuple[str | None, str | None]:
    """(name, owner) of a C/C++ function from its declarator chain: `int *A::f(void)`."""
    declarator = _field(node, "declarator")
    while declarator is not None and declarator.type not in _C_NAMES:
        inner = _field(declarator, "declarator")
        declarator = inner if inner is not None else _first_named(declarator)
    if declarator is None:
        return None, None
    owner = None
    while declarator.type == "qualified_identifier":
        scope = _field(declarator, "scope")
        owner = _text(_field(scope, "name") if scope and scope.type == "template_type" else scope)
        name = _field(declarator, "name")
        if name is None:
            break
        declarator = name
    return _text(declarator), owner


# Inline Markdown in a heading, reduced to the words a reader sees (the grammar's heading
# content is the raw source): links and images to their text, autolinks to their address,
# code spans and emphasis to their content.
_MD_LINK = re.compile(r"!?\[([^\]]*)\](?:\([^)]*\)|\[[^\]]*\])")
_MD_AUTOLINK = re.compile(r"<((?:https?|mailto):[^>\s]+)>")
# Underscores inside a word (snake_case) are not emphasis.
_MD_EMPHASIS = re.compile(
    r"(\*{1,3}|~~)(?P<a>\S(?:.*?\S)?)\1|(?<!\w)(_{1,3})(?P<b>\S(?:.*?\S)?)\3(?!\w)"
)
_MD_CODE = re.compile(r"`+([^`]*)`+")


def _plain_heading(text: str | None) -> str | None:
    if text is None:
        return None
    text = _MD_LINK.sub(r"\1", text)
    text = _MD_AUTOLINK.sub(r"\1", text)
    text = _MD_CODE.sub(r"\1", text)
    text = _MD_EMPHASIS.sub(lambda m: m["a"] or m["b"], text)
    return " ".join(text.split()) or None


def _heading(node: Node) -> str | None:
    first = _first_named(node)
    if first is None or not first.type.endswith("heading"):
        return None
    return _plain_heading(_text(_field(first, "heading_content")))


def _config_key(node: Node) -> str | None:
    text = _text(_field(node, "key") or _first_named(node))
    return text.strip("\"'") if text else None


def _first_key(node: Node, ctx: _Ctx) -> str | None:
    """First key inside a config wrapper (a JSON object, a YAML document), to name it by."""
    if ctx.language not in _CONFIG_LANGUAGES:
        return None
    keyed = _first_of_type(node, _CONFIG_KEYED)
    return _config_key(keyed) if keyed is not None else None


# --- definitions ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Ctx:
    """Where a run of sibling nodes sits."""

    language: str
    depth: int = 0
    owner: str | None = None  # name of the enclosing definition
    owner_parent: str | None = None
    class_like: bool = False  # functions here are methods
    plain_type: str = "module"  # chunk type of plain statements here

    def inside(self, found: _Def) -> _Ctx:
        plain = "section" if found.chunk_type == "section" else "block"
        return replace(
            self,
            depth=self.depth + 1,
            owner=found.name,
            owner_parent=found.parent,
            class_like=found.class_like,
            plain_type=plain,
        )


@dataclass(frozen=True, slots=True)
class _Def:
    chunk_type: str | None  # None: a config key, merged like a plain statement
    name: str | None
    parent: str | None
    class_like: bool
    node: Node  # the definition itself, wrappers removed


def _unwrap(node: Node) -> Node:
    for _ in range(4):
        if node.type not in _WRAPPERS:
            break
        field = _WRAPPERS[node.type]
        inner = _field(node, field) if field else None
        if inner is None:
            units = _units(node)
            inner = units[-1] if units else None
        if inner is None or (node.type == "expression_statement" and inner.type not in _NAMESPACES):
            break
        node = inner
    return node


def _function_value_name(node: Node) -> str | None:
    """Name of `const f = () => {}` / `h = function () {}`; None if not a function value."""
    if node.type in _VARIABLE_DECLARATIONS:
        declarators = [c for c in node.named_children if c.type == "variable_declarator"]
        if len(declarators) != 1:
            return None
        node = declarators[0]
    value = _field(node, "value")
    if value is None or value.type not in _FUNCTION_VALUES:
        return None
    return _text(_field(node, "name") or _field(node, "property"))


def _definition(node: Node, ctx: _Ctx) -> _Def | None:
    inner = _unwrap(node)
    kind = inner.type
    name: str | None
    parent = ctx.owner
    if kind in _FUNCTIONS or kind in _METHODS:
        if kind == "function_definition" and _field(inner, "name") is None:  # C, C++
            name, owner = _c_name(inner)
            parent = owner or parent
            is_method = ctx.class_like or owner is not None
        elif kind == "method_declaration" and _field(inner, "receiver") is not None:  # Go
            name, parent = _name_of(inner), _type_name(_field(inner, "receiver"))
            is_method = True
        else:
            name = _name_of(inner)
            is_method = ctx.class_like or kind in _METHODS
        return _Def("method" if is_method else "function", name, parent, False, inner)
    if kind in _VARIABLE_DECLARATIONS or kind in _FIELD_DEFINITIONS:
        name = _function_value_name(inner)
        if name is None:
            return None
        is_method = ctx.class_like or kind in _FIELD_DEFINITIONS
        return _Def("method" if is_method else "function", name, parent, False, inner)
    if kind in _CLASSES:
        if kind == "impl_item":
            name = _type_name(_field(inner, "type"))
        elif kind == "type_declaration":
            spec = _first_named(inner)
            name = _text(_field(spec, "name")) if spec else None
        elif kind == "type_definition":
            body = _field(_field(inner, "type") or inner, "body")
            if body is None:
                return None  # `typedef int x;` is a plain statement
            name = _text(_field(inner, "declarator"))
        elif kind.endswith("_specifier"):
            if _field(inner, "body") is None:
                return None  # a forward declaration or a type use
            name = _name_of(inner)
        else:
            name = _name_of(inner)
        return _Def("class", name, parent, True, inner)
    if kind in _NAMESPACES or (kind == _RUBY_MODULE and ctx.language == "ruby"):
        name = _name_of(inner)
        return _Def("module", name, parent, kind == _RUBY_MODULE, inner)
    if kind == "section":
        return _Def("section", _heading(inner), parent, False, inner)
    if ctx.language in _CONFIG_LANGUAGES and kind in _CONFIG_KEYED:
        return _Def(None, _config_key(inner), parent, False, inner)
    return None


def _openable(node: Node) -> bool:
    return (
        _end_row(node) > _start_row(node)
        and node.named_child_count > 0
        and not node.type.endswith("heading")
    )


def _body_units(node: Node, header_end: int) -> tuple[list[Node], int]:
    """Cut points of a definition: the children of its body. Children before the body that
    start on signature rows (name, parameters, decorators) extend the signature instead."""
    children = [
        (child, node.field_name_for_child(i) in _BODY_FIELDS)
        for i, child in enumerate(node.children)
        if not _is_trivia(child)
    ]
    has_body = any(is_body for _, is_body in children)
    out: list[Node] = []
    for child, is_body in children:
        on_header = _start_row(child) <= header_end
        if _openable(child) and (is_body or (on_header and not has_body)):
            inner, header_end = _body_units(child, header_end)
            out.extend(inner)
        elif on_header and not out:
            header_end = max(header_end, _end_row(child))
        else:
            out.append(child)
    return out, header_end


def _definition_units(node: Node, ctx: _Ctx) -> list[Node]:
    units, _ = _body_units(node, _start_row(node))
    # A body that is one wrapper (Go's statement_list, YAML's block_mapping): cut inside it.
    while len(units) == 1 and _openable(units[0]) and _definition(units[0], ctx) is None:
        units = _units(units[0])
    return units


# --- pieces ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Atom:
    """A run of lines that is one unit (or part of one) before merging."""

    lo: int
    hi: int
    kind: str | None = None  # chunk type when this is one definition
    name: str | None = None
    parent: str | None = None
    final: tuple[str, str | None, str | None] | None = None  # piece of a split; never merged


def _span_groups(nodes: list[Node], lo: int, hi: int) -> list[tuple[int, int, list[Node]]]:
    """Line spans of sibling nodes, clipped to lo..hi; nodes that share a line share a span."""
    spans: list[tuple[int, int, list[Node]]] = []
    for node in nodes:
        start, end = max(_start_row(node), lo), min(_end_row(node), hi)
        if spans and start <= spans[-1][1]:
            prev_start, prev_end, group = spans[-1]
            group.append(node)
            spans[-1] = (prev_start, max(prev_end, end), group)
        elif start <= end:
            spans.append((start, end, [node]))
    return spans


def _detached(lines: _Lines, gap: tuple[int, int], unit: tuple[int, int]) -> bool:
    """A long comment block stands alone rather than blowing up its neighbour's chunk."""
    gap_size = lines.size(*gap)
    return gap_size > lines.max_chars // 2 and gap_size + lines.size(*unit) > lines.max_chars


def _plain(lines: _Lines, lo: int, hi: int) -> list[_Atom]:
    return [_Atom(a, b) for a, b in _windows(lines, lo, hi)]


def _pieces(nodes: list[Node], lo: int, hi: int, lines: _Lines, ctx: _Ctx) -> list[_Atom]:
    """Atoms covering exactly lines lo..hi: one per node (split when too big), with the gap
    lines before a node (comments, decorators, blanks) attached to it and the lines after the
    last node attached to that one."""
    spans = _span_groups(nodes, lo, hi)
    if not spans:
        return _plain(lines, lo, hi)
    atoms: list[_Atom] = []
    prev_end = lo - 1
    for index, (start, end, group) in enumerate(spans):
        first, last = prev_end + 1, hi if index == len(spans) - 1 else end
        if first < start and _detached(lines, (first, start - 1), (start, end)):
            atoms.extend(_plain(lines, first, start - 1))
            first = start
        trailing: list[_Atom] = []
        if end < last and _detached(lines, (end + 1, last), (first, end)):
            trailing = _plain(lines, end + 1, last)
            last = end
        atoms.extend(_unit(group, first, last, lines, ctx))
        atoms.extend(trailing)
        prev_end = end
    return atoms


def _unit(group: list[Node], lo: int, hi: int, lines: _Lines, ctx: _Ctx) -> list[_Atom]:
    found = next((d for d in (_definition(n, ctx) for n in group) if d), None)
    if lines.size(lo, hi) <= lines.max_chars or lo == hi:
        if found is None:
            return [_Atom(lo, hi, name=_first_key(group[0], ctx))]
        return [_Atom(lo, hi, found.chunk_type, found.name, found.parent)]
    if ctx.depth >= _MAX_DEPTH:
        return _plain(lines, lo, hi)
    if found is not None and len(group) == 1:
        return _split(found, lo, hi, lines, ctx)
    # Open the node(s) up in place: `extern "C" {` shares its line with its body, so cut
    # inside the multi-line members and keep the rest as units of their own.
    units = [u for node in group for u in (_units(node) if _openable(node) else [node])]
    if len(units) == len(group) and all(not _openable(u) for u in units):
        return _plain(lines, lo, hi)
    return _pieces(units, lo, hi, lines, replace(ctx, depth=ctx.depth + 1))


def _split(found: _Def, lo: int, hi: int, lines: _Lines, ctx: _Ctx) -> list[_Atom]:
    """A definition too big for one chunk, cut at its body's children and merged again; the
    pieces carry the definition as owner and are final."""
    inner = ctx.inside(found)
    units = _definition_units(found.node, inner)
    atoms = _pieces(units, lo, hi, lines, inner) if units else _plain(lines, lo, hi)
    return [
        _Atom(group[0].lo, group[-1].hi, final=_describe(group, lines, inner))
        for group in _merge(atoms, lines)
    ]


# --- merging --------------------------------------------------------------------------------


def _joinable(group: list[_Atom], atom: _Atom, lines: _Lines) -> bool:
    if atom.final is not None or group[-1].final is not None:
        return False
    if lines.size(group[0].lo, atom.hi) > lines.max_chars:
        return False
    plain = atom.kind is None and all(a.kind is None for a in group)
    small = min(lines.size(group[0].lo, group[-1].hi), lines.size(atom.lo, atom.hi))
    return plain or small < lines.min_chars


def _merge(atoms: list[_Atom], lines: _Lines) -> list[list[_Atom]]:
    groups: list[list[_Atom]] = []
    for atom in atoms:
        if groups and _joinable(groups[-1], atom, lines):
            groups[-1].append(atom)
        else:
            groups.append([atom])
    return groups


def _describe(group: list[_Atom], lines: _Lines, ctx: _Ctx) -> tuple[str, str | None, str | None]:
    """(chunk_type, name, parent_name) of a merged group."""
    if len(group) == 1 and group[0].final is not None:
        return group[0].final
    defs = [a for a in group if a.kind is not None]
    def_chars = sum(lines.size(a.lo, a.hi) for a in defs)
    if defs and 2 * def_chars >= lines.size(group[0].lo, group[-1].hi):
        kinds = {a.kind for a in defs}
        chunk_type = defs[0].kind if len(kinds) == 1 else "block"
        name = next((a.name for a in defs if a.name), None)
        return chunk_type or "block", name, defs[0].parent
    key = next((a.name for a in group if a.kind is None and a.name), None)
    if key is not None:  # config keys: the first key, under the key they sit in
        return ctx.plain_type, key, ctx.owner
    if ctx.owner is not None:  # part of a body: named after its definition
        return ctx.plain_type, ctx.owner, ctx.owner_parent
    return ctx.plain_type, next((a.name for a in defs if a.name), None), None


# --- entry point ----------------------------------------------------------------------------


def _tree_atoms(text: str, language: str, lines: _Lines, parsed: Tree | None) -> list[_Atom] | None:
    tree = parsed or parse(text, language)
    if tree is None:
        return None
    ctx = _Ctx(language, plain_type="section" if language == "markdown" else "module")
    last = lines.count - 1
    atoms = _pieces(_units(tree.root_node), 0, last, lines, ctx)
    return [
        _Atom(group[0].lo, group[-1].hi, final=_describe(group, lines, ctx))
        for group in _merge(atoms, lines)
    ]


def chunk_text(
    text: str,
    language: str | None,
    *,
    max_chars: int = 1500,
    min_chars: int = 200,
    parsed: Tree | None = None,
) -> list[Chunk]:
    """Chunks covering every line of ``text`` exactly once, in order; [] for blank text.
    ``parsed``: the text's syntax tree (`parse`) when the caller has it for the code graph."""
    if not text.strip():
        return []
    lines = _Lines(text, _line_offsets(text), max(1, max_chars), min_chars)
    atoms: list[_Atom] | None = None
    parseable = len(text) <= _MAX_PARSE_CHARS and len(text) <= _MAX_AVERAGE_LINE * lines.count
    if language and parseable:
        atoms = _tree_atoms(text, language, lines, parsed)
    if atoms is None:
        atoms = [
            _Atom(lo, hi, final=("lines", None, None))
            for lo, hi in _windows(lines, 0, lines.count - 1)
        ]
    return [
        Chunk(a.lo + 1, a.hi + 1, lines.content(a.lo, a.hi), *(a.final or ("lines", None, None)))
        for a in atoms
    ]
