"""Definitions, imports, calls and base classes of one source file, from its syntax tree.

Pure: text in, a :class:`FileGraph` of plain data out. Resolution to files and symbols of the
project is a separate stage (workers/stages/codegraph/resolve.py).

Symbols are what the chunker names: top-level functions, classes and module-level names, and
the members of a class-like body (parent = the innermost class). A function nested in a
function is not a symbol: its calls count as calls of the symbol around it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from operator import attrgetter

from tree_sitter import Language, Node, Query, QueryCursor, Tree

from workers.stages.chunking import parse, parser_for

__all__ = ["GRAPH_LANGUAGES", "Call", "Definition", "FileGraph", "Import", "Inherit", "extract"]


# Not frozen: a frozen dataclass's __init__ sets each field through object.__setattr__, three
# times the cost, and a large Java file has tens of thousands of calls. Never changed after.
@dataclass(slots=True)
class Definition:
    name: str
    parent: str | None  # the innermost class-like definition around it
    kind: str  # function | method | class | name
    line: int  # 1-based

    @property
    def qualified(self) -> str:
        return f"{self.parent}.{self.name}" if self.parent else self.name


@dataclass(frozen=True, slots=True)
class Import:
    """`module` as written (`.connections`, `arq.jobs`, `./util`, `fmt`, `crate::a::b`);
    `names`: (imported name, local name) pairs; `alias`: the local name bound to the module
    itself (`import a.b as m`, `import * as m`, Go's package name), if any."""

    module: str
    line: int
    names: tuple[tuple[str, str], ...] = ()
    alias: str | None = None


@dataclass(slots=True)  # not frozen, as Definition
class Call:
    """A call in `scope` (a definition's qualified name; None at module level) of `name`,
    through `receiver` (`self`, a module alias, a class name…) when there is one."""

    scope: str | None
    name: str
    receiver: str | None
    line: int
    # The class the receiver is an instance of, when the file says (Python: a parameter's
    # annotation, `x = Cls(...)`, `with Cls(...) as x`, `self.x = Cls(...)`), as written.
    instance_of: str | None = None


@dataclass(frozen=True, slots=True)
class Inherit:
    cls: str  # qualified name of the class
    base: str  # the base as written, last dotted part is its name
    line: int


@dataclass(slots=True)
class FileGraph:
    language: str
    definitions: list[Definition] = field(default_factory=list)
    imports: list[Import] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    inherits: list[Inherit] = field(default_factory=list)
    package: str | None = None  # Java's `package a.b;`: where the source root is


def _text(node: Node | None) -> str:
    # `node.text` slices the source anew each time it is read: once (a million calls on kafka).
    text = node.text if node is not None else None
    return text.decode("utf-8", "replace") if text else ""


def _line(node: Node) -> int:
    return node.start_point[0] + 1


def _walk(node: Node) -> Iterator[Node]:
    """Every node under `node` (not itself), depth first, without recursion."""
    stack = list(reversed(node.children))
    while stack:
        child = stack.pop()
        yield child
        stack.extend(reversed(child.children))


@functools.cache
def _query(language: str, kinds: tuple[str, ...]) -> Query | None:
    """A query capturing nodes of these kinds (those the grammar has) as `node`."""
    parser = parser_for(language)
    grammar = parser.language if parser is not None else None
    if grammar is None:
        return None
    known = [k for k in kinds if grammar.id_for_node_kind(k, True)]
    return Query(grammar, "[" + " ".join(f"({k})" for k in known) + "] @node") if known else None


def _grammar(language: str) -> Language:
    parser = parser_for(language)
    assert parser is not None and parser.language is not None, language
    return parser.language


@functools.cache
def _kind_id(language: str, kind: str) -> int:
    return _grammar(language).id_for_node_kind(kind, True)


@functools.cache
def _field_id(language: str, name: str) -> int:
    return _grammar(language).field_id_for_name(name)


_START = attrgetter("start_byte")
_END = attrgetter("end_byte")


def _found(language: str, kinds: tuple[str, ...], node: Node) -> list[Node]:
    """The nodes of these kinds under `node` (itself included), in document order, an outer
    node before the nodes inside it: the order a depth-first walk meets them. The query runs
    in the grammar's C code: walking every node in Python cost most of the extraction (a
    large Java file has 100,000 nodes and a few thousand calls)."""
    query = _query(language, kinds)
    if query is None:
        return []
    found = QueryCursor(query).captures(node).get("node", [])
    # Captures do not come in document order. By start, and at one start the outer (longer)
    # first: two stable sorts with keys read in C (one key function in Python, returning
    # (start, -end), cost twice as much on kafka's 570,000 calls).
    found.sort(key=_END, reverse=True)
    found.sort(key=_START)
    return found


class _Scopes:
    """Walks the tree keeping the symbol a node sits in: `scope` for calls, `parent` for
    definitions."""

    def __init__(self, graph: FileGraph) -> None:
        self.graph = graph

    def define(self, name: str, parent: str | None, kind: str, node: Node) -> str:
        found = Definition(name, parent, kind, _line(node))
        self.graph.definitions.append(found)
        return found.qualified


# --- Python -------------------------------------------------------------------------------------


_PYTHON_NODES = (
    "function_definition",
    "class_definition",
    "call",
    "assignment",
    "as_pattern",
    "import_statement",
    "import_from_statement",
)
# Statements whose children are at the level of their container (a module, a class body).
_PYTHON_LEVEL = frozenset({"block", "if_statement", "else_clause"})


@dataclass(slots=True)
class _Open:
    """A definition the nodes that follow may sit in: its header (decorators, bases,
    parameters) is in the scope around it, its body in its own scope."""

    end: int
    body: int  # where the body starts
    outer: tuple[str | None, str | None]  # (class, scope) around it
    inner: tuple[str | None, str | None]  # (class, scope) of its body
    is_symbol_class: bool  # a class whose body's definitions are symbols
    unread: tuple[int, int]  # a function's type parameters: no call of them is counted


def _python(root: Node, graph: FileGraph) -> None:
    scopes = _Scopes(graph)
    typing = _PythonTypes()
    symbol_classes: set[int] = set()  # start bytes of the classes whose members are symbols

    def at_top(container: Node | None) -> bool:
        """Whether the children of `container` are at module or symbol-class level: reached
        from there through blocks, `if` and `else` only (not `elif`, `try`, `with`...)."""
        while container is not None:
            kind = container.type
            if kind == "module":
                return True
            if kind not in _PYTHON_LEVEL:
                return False
            parent = container.parent
            if parent is not None and parent.type == "class_definition":
                return parent.start_byte in symbol_classes
            container = parent
        return False

    # Kinds and fields by number, once per file: the loop meets every call of the file.
    function = _field_id("python", "function")
    member = _member_ids("python", "attribute", "object", "attribute")
    calls = _kind_id("python", "call")
    stack: list[_Open] = []
    for node in _found("python", _PYTHON_NODES, root):
        start = node.start_byte
        while stack and stack[-1].end <= start:
            stack.pop()
        cls = scope = None
        maybe_top = not stack
        if stack:
            around = stack[-1]
            if start >= around.body:
                cls, scope = around.inner
                maybe_top = around.is_symbol_class
            elif around.unread[0] <= start < around.unread[1]:
                continue
            else:
                cls, scope = around.outer
        if node.kind_id == calls:
            _add_call(graph, node, node.child_by_field_id(function), scope, member)
            continue
        kind = node.type
        if kind in ("function_definition", "class_definition"):
            parent = node.parent
            if parent is not None and parent.type == "decorated_definition":
                parent = parent.parent
            top = maybe_top and at_top(parent)
            stack.append(_python_definition(node, cls, scope, top, scopes, typing))
            if top and kind == "class_definition":
                symbol_classes.add(start)
        elif kind == "import_statement":
            for name in node.children_by_field_name("name"):
                if name.type == "aliased_import":
                    module = _text(name.child_by_field_name("name"))
                    alias = _text(name.child_by_field_name("alias"))
                    graph.imports.append(Import(module, _line(node), alias=alias))
                else:
                    module = _text(name)
                    # `import a.b` binds `a`; calls through `a.b.f` are seen as receiver a.b
                    graph.imports.append(Import(module, _line(node), alias=module))
        elif kind == "import_from_statement":
            module = _text(node.child_by_field_name("module_name"))
            names: list[tuple[str, str]] = []
            for name in node.children_by_field_name("name"):
                if name.type == "aliased_import":
                    names.append(
                        (
                            _text(name.child_by_field_name("name")),
                            _text(name.child_by_field_name("alias")),
                        )
                    )
                else:
                    names.append((_text(name), _text(name).rsplit(".", 1)[-1]))
            graph.imports.append(Import(module, _line(node), tuple(names)))
        else:  # an assignment or `... as x`
            if scope is not None:
                typing.note(node, cls, scope)
            if kind == "assignment" and maybe_top:
                # A module's (a class's) names: `x = ...` at that level, and `x = y = ...`
                # (the grammar nests the second assignment in the first).
                parent = node.parent
                if parent is not None and parent.type in ("expression_statement", "assignment"):
                    parent = parent.parent
                left = node.child_by_field_name("left")
                if left is not None and left.type == "identifier" and at_top(parent):
                    scopes.define(_text(left), cls, "name", left)
    if typing.local or typing.attrs:  # else no call's receiver has a known class
        graph.calls = [typing.typed(call, _class_of(call.scope, graph)) for call in graph.calls]


def _python_definition(
    node: Node,
    cls: str | None,
    scope: str | None,
    top: bool,
    scopes: _Scopes,
    typing: _PythonTypes,
) -> _Open:
    """A `def` or `class`: a symbol when `top` (module level or a class body), else its calls
    count for the scope around it."""
    graph = scopes.graph
    name = _text(node.child_by_field_name("name"))
    is_class = node.type == "class_definition"
    if top:
        kind = "class" if is_class else ("method" if cls else "function")
        qualified = scopes.define(name, cls, kind, node)
    else:
        qualified = scope or name
    unread = (0, 0)
    if is_class:
        bases = node.child_by_field_name("superclasses")
        for base in bases.named_children if bases is not None else []:
            if base.type in ("identifier", "attribute"):
                graph.inherits.append(Inherit(qualified, _text(base), _line(base)))
    else:
        typing.parameters(node.child_by_field_name("parameters"), qualified)
        params = node.child_by_field_name("type_parameters")
        if params is not None:
            unread = (params.start_byte, params.end_byte)
    body = node.child_by_field_name("body")
    return _Open(
        end=node.end_byte,
        body=body.start_byte if body is not None else node.end_byte,
        outer=(cls, scope),
        inner=(name if is_class and top else cls, qualified),
        is_symbol_class=is_class and top,
        unread=unread,
    )


@functools.cache
def _member_ids(
    language: str, member: str, object_field: str, property_field: str
) -> tuple[int, int, int]:
    """(kind of a `member` access, its object field, its property field) by number."""
    return (
        _kind_id(language, member),
        _field_id(language, object_field),
        _field_id(language, property_field),
    )


def _add_call(
    graph: FileGraph,
    node: Node,
    func: Node | None,
    scope: str | None,
    member: tuple[int, int, int],
) -> None:
    """A call (`node`) of `func`: a bare name, or a member access (`_member_ids`: Python's
    `attribute`, JavaScript's `member_expression`) calling its property on its object."""
    if func is None:
        return
    kind = func.type
    if kind == "identifier":
        graph.calls.append(Call(scope, _text(func), None, _line(node)))
    elif func.kind_id == member[0]:
        name = _text(func.child_by_field_id(member[2]))
        receiver = _receiver(func.child_by_field_id(member[1]))
        graph.calls.append(Call(scope, name, receiver, _line(node)))


def _class_of(scope: str | None, graph: FileGraph) -> str | None:
    """The class a method's `self` is: the parent of the scope's definition."""
    if not scope or "." not in scope:
        return None
    return scope.rsplit(".", 1)[0]


_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def _class_name(text: str) -> str | None:
    """The class an annotation names, if one (`Auth`, `"Auth"`, `Optional[x.Auth]`,
    `Auth | None`); None for anything else (a union of classes, a generic container)."""
    text = text.strip().strip("'\"")
    if text.startswith(("Optional[", "typing.Optional[")) and text.endswith("]"):
        text = text[text.index("[") + 1 : -1].strip().strip("'\"")
    parts = [p.strip() for p in text.split("|") if p.strip() != "None"]
    if len(parts) != 1 or not _DOTTED.fullmatch(parts[0]):
        return None
    return parts[0]


def _constructed(node: Node | None) -> str | None:
    """`Cls(...)`/`mod.Cls(...)`: the class, by the convention that classes are capitalised."""
    if node is None or node.type != "call":
        return None
    func = node.child_by_field_name("function")
    if func is None or func.type not in ("identifier", "attribute"):
        return None
    text = _text(func)
    return text if _DOTTED.fullmatch(text) and text.rsplit(".", 1)[-1][:1].isupper() else None


class _PythonTypes:
    """What class a local name or a `self` attribute holds, where the file says it plainly;
    a name given two different classes holds none (no flow analysis)."""

    def __init__(self) -> None:
        self.local: dict[tuple[str, str], str | None] = {}  # (scope, name) -> class
        self.attrs: dict[tuple[str, str], str | None] = {}  # (class, attribute) -> class

    def _set(self, into: dict[tuple[str, str], str | None], key: tuple[str, str], cls: str) -> None:
        into[key] = cls if into.get(key, cls) == cls else None

    def parameters(self, node: Node | None, scope: str) -> None:
        for param in node.named_children if node is not None else []:
            if param.type not in ("typed_parameter", "typed_default_parameter"):
                continue
            name = param.child_by_field_name("name") or next(
                (c for c in param.named_children if c.type == "identifier"), None
            )
            found = _class_name(_text(param.child_by_field_name("type")))
            if name is not None and found:
                self._set(self.local, (scope, _text(name)), found)

    def note(self, node: Node, cls: str | None, scope: str) -> None:
        if node.type == "as_pattern":  # `with Cls(...) as x`
            left = node.child_by_field_name("alias")
            left = left.named_children[0] if left is not None and left.named_children else None
            value = node.named_children[0] if node.named_children else None
        else:
            left, value = node.child_by_field_name("left"), node.child_by_field_name("right")
        if left is None:
            return
        annotation = node.child_by_field_name("type") if node.type == "assignment" else None
        found = _class_name(_text(annotation)) if annotation is not None else None
        if found is None:
            found = _constructed(value)
        if found is None and value is not None and value.type == "identifier":
            found = self.local.get((scope, _text(value)))  # `self.x = x` of a typed parameter
        if found is None:
            return
        if left.type == "identifier":
            self._set(self.local, (scope, _text(left)), found)
        elif left.type == "attribute" and cls is not None:
            obj = left.child_by_field_name("object")
            if obj is not None and _text(obj) == "self":
                self._set(self.attrs, (cls, _text(left.child_by_field_name("attribute"))), found)

    def typed(self, call: Call, cls: str | None) -> Call:
        receiver = call.receiver
        if not receiver or receiver == COMPUTED or not call.scope:
            return call
        if "." not in receiver:
            found = self.local.get((call.scope, receiver))
        elif receiver.count(".") == 1 and receiver.startswith("self.") and cls is not None:
            found = self.attrs.get((cls, receiver[5:]))
        else:
            return call
        return replace(call, instance_of=found) if found else call


# The receiver of a call on a computed value (`f().g()`, `x[0].g()`): never a name in scope.
COMPUTED = "?"


_NAMED_RECEIVERS = (
    "identifier",
    "self",
    "this",
    "super",
    "package_identifier",
    "scoped_identifier",
    "scoped_type_identifier",
)
_DOTTED_RECEIVERS = ("attribute", "member_expression", "selector_expression", "field_access")


@functools.cache
def _receiver_kinds(language: str) -> tuple[frozenset[int], frozenset[int]]:
    """The kind ids of a language's receivers taken as written, and of its dotted ones."""
    grammar = _grammar(language)
    ids = [
        frozenset(i for i in (grammar.id_for_node_kind(k, True) for k in kinds) if i)
        for kinds in (_NAMED_RECEIVERS, _DOTTED_RECEIVERS)
    ]
    return ids[0], ids[1]


def _dotted(text: str) -> str:
    """A dotted receiver's text (`self.client`), COMPUTED when a part is not a name."""
    return text if all(part.isidentifier() for part in text.split(".")) else COMPUTED


def _receiver(node: Node | None) -> str | None:
    """A dotted receiver (`self`, `a.b`, `pkg`); COMPUTED for anything else (`f().g()`)."""
    if node is None:
        return None
    kind = node.type
    if kind in _NAMED_RECEIVERS:
        return _text(node)
    if kind in _DOTTED_RECEIVERS:
        return _dotted(_text(node))
    if kind == "call" and _text(node.child_by_field_name("function")) == "super":
        return "super"  # Python's `super().m()`
    return COMPUTED


# --- TypeScript / JavaScript ----------------------------------------------------------------------

_JS_CLASS = frozenset({"class_declaration", "class", "abstract_class_declaration"})
_JS_FUNCTION = frozenset({"function_declaration", "generator_function_declaration"})
_JS_METHOD = frozenset({"method_definition", "method_signature", "abstract_method_signature"})


# What below the top level still counts: calls, imports, and the bases of a class.
_JS_INNER = (
    "call_expression",
    "new_expression",
    "import_statement",
    *_JS_CLASS,
    "interface_declaration",
)


def _js(root: Node, graph: FileGraph) -> None:
    scopes = _Scopes(graph)

    def visit(node: Node, cls: str | None, scope: str | None) -> None:
        """The top level (the program, export statements, a top class's body): its
        definitions are symbols."""
        for child in node.children:
            kind = child.type
            if kind in ("export_statement", "program"):
                visit(child, cls, scope)
            elif kind in _JS_CLASS or kind == "interface_declaration":
                name = _text(child.child_by_field_name("name"))
                qualified = scopes.define(name, cls, "class", child) if name else scope
                _js_bases(child, qualified or name, graph)
                body = child.child_by_field_name("body")
                if body is not None:
                    visit(body, name, qualified)
            elif kind in _JS_FUNCTION:
                name = _text(child.child_by_field_name("name"))
                inner(child, scopes.define(name, cls, "function", child))
            elif kind in _JS_METHOD and cls:
                name = _text(child.child_by_field_name("name"))
                inner(child, scopes.define(name, cls, "method", child))
            elif kind in ("lexical_declaration", "variable_declaration"):
                for decl in child.named_children:
                    if decl.type != "variable_declarator":
                        continue
                    name_node = decl.child_by_field_name("name")
                    _js_require(decl, graph)
                    if name_node is None or name_node.type != "identifier":
                        inner(decl, scope)
                        continue
                    value = decl.child_by_field_name("value")
                    is_fn = value is not None and value.type in (
                        "arrow_function",
                        "function_expression",
                        "function",
                    )
                    qualified = scopes.define(
                        _text(name_node), cls, "function" if is_fn else "name", name_node
                    )
                    inner(decl, qualified if is_fn else scope)
            elif kind == "public_field_definition" and cls:
                name = _text(child.child_by_field_name("name"))
                inner(child, scopes.define(name, cls, "name", child))
            elif kind == "import_statement":
                _js_import(child, graph)
            elif kind in ("call_expression", "new_expression"):
                add_call(child, scope)
                inner(child, scope)
            else:
                inner(child, scope)

    def inner(node: Node, scope: str | None) -> None:
        """Below the top level nothing is a symbol: its calls count for `scope`, a class's
        bases for `scope` (the class when none). One query, not a walk in Python of every
        node (that walk was most of a TypeScript file's extraction)."""
        for sub in _found(graph.language, _JS_INNER, node):
            kind = sub.type
            if kind in ("call_expression", "new_expression"):
                if sub != node:  # `node` itself is counted by who called this
                    add_call(sub, scope)
            elif kind == "import_statement":
                _js_import(sub, graph)
            else:
                _js_bases(sub, scope or _text(sub.child_by_field_name("name")), graph)

    member = _member_ids(graph.language, "member_expression", "object", "property")

    def add_call(node: Node, scope: str | None) -> None:
        func = node.child_by_field_name(
            "constructor" if node.type == "new_expression" else "function"
        )
        _add_call(graph, node, func, scope, member)

    visit(root, None, None)


def _js_bases(node: Node, name: str, graph: FileGraph) -> None:
    """The bases of a class or an interface (named `name`), before its body."""
    for sub in _walk(node):
        # JavaScript's heritage holds the expression; TypeScript's, clauses
        if sub.type in (
            "class_heritage",
            "extends_clause",
            "implements_clause",
            "extends_type_clause",
        ):
            for base in sub.named_children:
                if base.type in ("identifier", "type_identifier", "member_expression"):
                    graph.inherits.append(Inherit(name, _text(base), _line(base)))
        if sub.type in ("class_body", "interface_body", "object_type"):
            break


def _js_import(node: Node, graph: FileGraph) -> None:
    source = _text(node.child_by_field_name("source")).strip("'\"`")
    names: list[tuple[str, str]] = []
    alias: str | None = None
    for sub in _walk(node):
        if sub.type == "import_specifier":
            name = _text(sub.child_by_field_name("name"))
            local = sub.child_by_field_name("alias")
            names.append((name, _text(local) if local is not None else name))
        elif sub.type == "namespace_import":
            alias = _text(sub.named_children[-1]) if sub.named_children else None
        elif sub.type == "import_clause":
            first = sub.named_children[0] if sub.named_children else None
            if first is not None and first.type == "identifier":
                names.append(("default", _text(first)))
    graph.imports.append(Import(source, _line(node), tuple(names), alias))


def _js_require(decl: Node, graph: FileGraph) -> None:
    """`const x = require('./x')` and `const {a, b} = require('./x')`."""
    value = decl.child_by_field_name("value")
    if value is None or value.type != "call_expression":
        return
    if _text(value.child_by_field_name("function")) != "require":
        return
    args = value.child_by_field_name("arguments")
    strings = [a for a in (args.named_children if args else []) if a.type == "string"]
    if not strings:
        return
    source = _text(strings[0]).strip("'\"`")
    target = decl.child_by_field_name("name")
    if target is not None and target.type == "identifier":
        graph.imports.append(Import(source, _line(decl), alias=_text(target)))
    elif target is not None and target.type == "object_pattern":
        names = tuple(
            (_text(p), _text(p))
            for p in target.named_children
            if p.type == "shorthand_property_identifier_pattern"
        )
        graph.imports.append(Import(source, _line(decl), names))


# --- Go -----------------------------------------------------------------------------------------


def _go(root: Node, graph: FileGraph) -> None:
    scopes = _Scopes(graph)
    for child in root.children:
        kind = child.type
        if kind == "import_declaration":
            for spec in _walk(child):
                if spec.type == "import_spec":
                    path = _text(spec.child_by_field_name("path")).strip('"`')
                    name = spec.child_by_field_name("name")
                    alias = _text(name) if name is not None else path.rsplit("/", 1)[-1]
                    graph.imports.append(Import(path, _line(spec), alias=alias))
        elif kind == "function_declaration":
            scope = scopes.define(_text(child.child_by_field_name("name")), None, "function", child)
            _calls_in(child, scope, graph, "call_expression", "function", "selector_expression")
        elif kind == "method_declaration":
            receiver, var = _go_receiver(child.child_by_field_name("receiver"))
            name = _text(child.child_by_field_name("name"))
            scope = scopes.define(name, receiver, "method", child)
            start = len(graph.calls)
            _calls_in(child, scope, graph, "call_expression", "function", "selector_expression")
            # The receiver variable is Go's `self`, whatever its name.
            graph.calls[start:] = [
                replace(c, receiver="self") if var and c.receiver == var else c
                for c in graph.calls[start:]
            ]
        elif kind == "type_declaration":
            for spec in child.named_children:
                if spec.type not in ("type_spec", "type_alias"):
                    continue
                name = _text(spec.child_by_field_name("name"))
                scopes.define(name, None, "class", spec)
                body = spec.child_by_field_name("type")
                # Embedded types (a field with a type and no name) are Go's inheritance.
                for field_node in _walk(body) if body is not None else []:
                    if (
                        field_node.type == "field_declaration"
                        and not field_node.children_by_field_name("name")
                    ):
                        base = field_node.child_by_field_name("type")
                        if base is not None:
                            graph.inherits.append(
                                Inherit(name, _text(base).lstrip("*"), _line(field_node))
                            )
                    elif field_node.type == "type_elem":
                        graph.inherits.append(Inherit(name, _text(field_node), _line(field_node)))
        elif kind in ("var_declaration", "const_declaration"):
            for spec in _walk(child):
                if spec.type in ("var_spec", "const_spec"):
                    for name in spec.children_by_field_name("name"):
                        scopes.define(_text(name), None, "name", name)
            _calls_in(child, None, graph, "call_expression", "function", "selector_expression")


def _go_receiver(node: Node | None) -> tuple[str | None, str | None]:
    """(type name, variable name) of a method's receiver `(s *Server)`."""
    typ = var = None
    for sub in _walk(node) if node is not None else []:
        if sub.type == "type_identifier" and typ is None:
            typ = _text(sub)
        elif sub.type == "identifier" and var is None:
            var = _text(sub)
    return typ, var


def _calls_in(
    node: Node,
    scope: str | None,
    graph: FileGraph,
    call_type: str,
    field_name: str,
    *members: str,
) -> None:
    """Calls under `node` whose callee (field `field_name`) is a name or a member access."""
    for sub in _found(graph.language, (call_type,), node):
        func = sub.child_by_field_name(field_name)
        if func is None:
            continue
        if func.type == "identifier":
            graph.calls.append(Call(scope, _text(func), None, _line(sub)))
        elif func.type in members:
            name = func.child_by_field_name("field") or func.child_by_field_name("name")
            operand = func.child_by_field_name("operand") or func.child_by_field_name("value")
            if operand is None:  # rust scoped_identifier: path::name
                operand = func.child_by_field_name("path")
            graph.calls.append(Call(scope, _text(name), _receiver(operand), _line(sub)))


# --- Rust ---------------------------------------------------------------------------------------


def _rust(root: Node, graph: FileGraph) -> None:
    scopes = _Scopes(graph)

    def calls(node: Node, scope: str | None) -> None:
        _calls_in(
            node,
            scope,
            graph,
            "call_expression",
            "function",
            "scoped_identifier",
            "field_expression",
        )

    def visit(node: Node, owner: str | None) -> None:
        for child in node.children:
            kind = child.type
            if kind == "function_item" or (kind == "function_signature_item" and owner):
                name = _text(child.child_by_field_name("name"))
                scope = scopes.define(name, owner, "method" if owner else "function", child)
                calls(child, scope)
            elif kind in ("struct_item", "enum_item", "trait_item", "union_item", "type_item"):
                name = _text(child.child_by_field_name("name"))
                scopes.define(name, None, "class", child)
                if kind == "trait_item":
                    bounds = child.child_by_field_name("bounds")
                    for base in bounds.named_children if bounds is not None else []:
                        graph.inherits.append(Inherit(name, _text(base), _line(base)))
                    body = child.child_by_field_name("body")
                    if body is not None:
                        visit(body, name)
            elif kind == "impl_item":
                typ = _rust_type_name(child.child_by_field_name("type"))
                trait = child.child_by_field_name("trait")
                if typ and trait is not None:
                    graph.inherits.append(Inherit(typ, _text(trait), _line(trait)))
                body = child.child_by_field_name("body")
                if body is not None and typ:
                    visit(body, typ)
            elif kind in ("const_item", "static_item"):
                scopes.define(_text(child.child_by_field_name("name")), owner, "name", child)
                calls(child, None)
            elif kind == "use_declaration":
                for module, names, alias in _rust_uses(child.child_by_field_name("argument"), ""):
                    graph.imports.append(Import(module, _line(child), names, alias))
            elif kind == "mod_item":
                body = child.child_by_field_name("body")
                if body is None:  # `mod x;`: a file of the crate
                    graph.imports.append(
                        Import(f"self::{_text(child.child_by_field_name('name'))}", _line(child))
                    )
                else:
                    visit(body, owner)
            elif kind == "declaration_list":
                visit(child, owner)

    visit(root, None)


def _rust_type_name(node: Node | None) -> str | None:
    if node is None:
        return None
    if node.type == "generic_type":
        return _rust_type_name(node.child_by_field_name("type"))
    return _text(node).rsplit("::", 1)[-1]


def _rust_uses(
    node: Node | None, prefix: str
) -> Iterator[tuple[str, tuple[tuple[str, str], ...], str | None]]:
    """(module path, names, alias) of a `use` tree: `a::b::C` imports C from a::b."""
    if node is None:
        return
    join: Callable[[str], str] = lambda s: f"{prefix}::{s}" if prefix else s  # noqa: E731
    if node.type in ("scoped_identifier", "identifier", "crate", "self", "super"):
        full = join(_text(node))
        module, _, name = full.rpartition("::")
        yield (module, ((name, name),), None) if module else (full, (), full)
    elif node.type == "use_as_clause":
        full = join(_text(node.child_by_field_name("path")))
        module, _, name = full.rpartition("::")
        alias = _text(node.child_by_field_name("alias"))
        yield (module, ((name, alias),), None) if module else (full, (), alias)
    elif node.type == "scoped_use_list":
        path = node.child_by_field_name("path")
        base = join(_text(path)) if path is not None else prefix
        yield from _rust_uses(node.child_by_field_name("list"), base)
    elif node.type == "use_list":
        for item in node.named_children:
            yield from _rust_uses(item, prefix)
    elif node.type == "use_wildcard":
        yield (join(_text(node).removesuffix("::*")), (), None)


# --- Java ---------------------------------------------------------------------------------------

_JAVA_TYPES = frozenset(
    {"class_declaration", "interface_declaration", "enum_declaration", "record_declaration"}
)


_JAVA_CALLS = ("method_invocation", "object_creation_expression")


def _java(root: Node, graph: FileGraph) -> None:
    scopes = _Scopes(graph)

    def visit(node: Node, owner: str | None) -> None:
        for child in node.children:
            kind = child.type
            if kind == "package_declaration":
                graph.package = _text(child).removeprefix("package").removesuffix(";").strip()
            elif kind == "import_declaration":
                text = _text(child).removeprefix("import").removesuffix(";").strip()
                text = text.removeprefix("static ").strip()
                module, _, name = text.rpartition(".")
                if name == "*":
                    graph.imports.append(Import(module, _line(child)))
                else:
                    graph.imports.append(Import(module, _line(child), ((name, name),)))
            elif kind in _JAVA_TYPES:
                name = _text(child.child_by_field_name("name"))
                scopes.define(name, owner, "class", child)
                for part in ("superclass", "interfaces"):
                    sub = child.child_by_field_name(part)
                    if sub is not None:
                        _java_bases(sub, name, graph)
                for sub in child.children:
                    if sub.type == "extends_interfaces":
                        for base in _walk(sub):
                            if base.type == "type_identifier":
                                graph.inherits.append(Inherit(name, _text(base), _line(base)))
                body = child.child_by_field_name("body")
                if body is not None:
                    visit(body, name)
            elif kind in ("method_declaration", "constructor_declaration") and owner:
                name = _text(child.child_by_field_name("name"))
                scope = scopes.define(name, owner, "method", child)
                java_calls(child, scope)
            elif kind == "field_declaration" and owner:
                for decl in child.children_by_field_name("declarator"):
                    scopes.define(_text(decl.child_by_field_name("name")), owner, "name", decl)
                java_calls(child, owner)
            elif kind in ("class_body", "interface_body", "enum_body", "enum_body_declarations"):
                visit(child, owner)

    add = graph.calls.append
    invocation = _kind_id("java", "method_invocation")
    name_field, object_field, type_field = (
        _field_id("java", f) for f in ("name", "object", "type")
    )
    named, dotted = _receiver_kinds("java")
    # The file's bytes once: a node's text sliced from them costs less than `node.text` (which
    # slices a memoryview of the tree's source and copies it).
    source = root.text or b""

    def java_calls(node: Node, scope: str | None) -> None:
        # The loop over every call of the file (570,000 in kafka): what it calls bound once,
        # kinds and fields by number (`type` makes a new string each time, a field's name is
        # looked up among the grammar's names by string comparisons), `_text` and `_receiver`
        # inlined.
        field = Node.child_by_field_id
        for sub in _found("java", _JAVA_CALLS, node):
            if sub.kind_id == invocation:
                found = field(sub, name_field)
                name = (
                    source[found.start_byte : found.end_byte].decode("utf-8", "replace")
                    if found is not None
                    else ""
                )
                found = field(sub, object_field)
                if found is None:
                    receiver = None
                else:
                    kind = found.kind_id
                    if kind in named:
                        receiver = source[found.start_byte : found.end_byte].decode(
                            "utf-8", "replace"
                        )
                    elif kind in dotted:
                        receiver = _dotted(
                            source[found.start_byte : found.end_byte].decode("utf-8", "replace")
                        )
                    else:
                        receiver = COMPUTED
                add(Call(scope, name, receiver, sub.start_point[0] + 1))
            else:  # object_creation_expression
                typ = field(sub, type_field)
                if typ is not None:
                    text = source[typ.start_byte : typ.end_byte].decode("utf-8", "replace")
                    add(Call(scope, text.split("<")[0], None, sub.start_point[0] + 1))

    visit(root, None)


def _java_bases(node: Node, name: str, graph: FileGraph) -> None:
    """The bases of class `name` under its `superclass` or `interfaces` node, depth first:
    `Comparable<X>` names Comparable; `a.B` is one base, not two. Each node's parent is known
    on the way down (`Node.parent` searches the tree from its root each time)."""
    outer = node.type
    takes = outer in ("superclass", "type_list", "generic_type")
    for index, base in enumerate(node.children):
        if (
            takes
            and base.type in ("type_identifier", "scoped_type_identifier")
            and not (outer == "generic_type" and index > 0)
        ):
            graph.inherits.append(Inherit(name, _text(base), _line(base)))
        _java_bases(base, name, graph)


_EXTRACTORS: dict[str, Callable[[Node, FileGraph], None]] = {
    "python": _python,
    "javascript": _js,
    "typescript": _js,
    "tsx": _js,
    "go": _go,
    "rust": _rust,
    "java": _java,
}
GRAPH_LANGUAGES = frozenset(_EXTRACTORS)


def extract(text: str, language: str | None, parsed: Tree | None = None) -> FileGraph | None:
    """The graph facts of one file; None for a language without an extractor. `parsed`: the
    text's syntax tree (`parse`) when the caller has it, the chunker's too."""
    if language not in _EXTRACTORS:
        return None
    tree = parsed or parse(text, language)
    if tree is None:
        return None
    graph = FileGraph(language)
    _EXTRACTORS[language](tree.root_node, graph)
    return graph
