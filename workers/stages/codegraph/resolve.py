"""A file's graph facts resolved to the project: rows for symbols and the DEFINES, IMPORTS,
CALLS and INHERITS edges that file owns, and the references left to resolve by name.

Pure but for the project's layout, asked through a :class:`Tree` (which files exist): an import
resolves to a file of the project when one exists at the path the language's rules give,
else to an external `module` entity. A call resolves by the calling file's own definitions and
imports (`self.m()` to the method of the class it sits in): confidence 1. What neither settles
(`obj.m()`, a name from a star import or a package's re-export) is kept as a reference by name,
with where its target may be (files, `dir/` prefixes, `dir/*` directories) and, when the file
types the receiver, its class (`owner`; "" for a module-level name); `related` guesses its
target when asked, among the symbols of that name then (`guess`; confidence 0.9/number of
them), so an edit of another file never makes this file's rows stale.

Every edge is owned by the file it was read from (its `path`): re-indexing a file replaces
exactly its rows.
"""

from __future__ import annotations

import builtins
import functools
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from memoryd.ids import (
    file_entity_id,
    file_key,
    module_entity_id,
    module_key,
    split_file_key,
    stable_id,
    symbol_entity_id,
    symbol_key,
)
from memoryd.vocabulary import CALLS, DEFINES, IMPORTS, INHERITS
from workers.stages.codegraph.extract import COMPUTED, FileGraph

_SELF = frozenset({"self", "this", "cls", "Self"})
_JS = ("javascript", "typescript", "tsx")
# Methods of JavaScript's own objects (Object, Array, Map, Set, String, Promise, Function,
# RegExp, iterators): called on a value the file does not type, they are almost never the
# project's method of that name, so no guess is kept for them.
_JS_BUILTIN_METHODS = frozenset(
    "toString valueOf toJSON hasOwnProperty isPrototypeOf has get set delete add clear "
    "forEach map filter reduce reduceRight push pop shift unshift slice splice concat join "
    "includes indexOf lastIndexOf find findIndex findLast some every keys values entries sort "
    "reverse flat flatMap fill at then catch finally apply call bind split replace replaceAll "
    "trim trimStart trimEnd startsWith endsWith match matchAll test exec charAt charCodeAt "
    "toLowerCase toUpperCase padStart padEnd repeat substring localeCompare next".split()
)
_DEFINES, _IMPORTS, _CALLS, _INHERITS = (e.table for e in (DEFINES, IMPORTS, CALLS, INHERITS))
# Python's builtins are never a project's symbols: calls of them are not kept.
_BUILTINS = frozenset(dir(builtins))


class Tree(Protocol):
    def is_file(self, rel: str) -> bool: ...

    def files_in(self, rel_dir: str, suffix: str) -> list[str]: ...


@dataclass(slots=True)
class GraphRows:
    """What one file contributes to the graph (plain rows for memoryd/store/codegraph.py)."""

    path: str
    symbols: list[dict[str, Any]] = field(default_factory=list)
    modules: list[dict[str, Any]] = field(default_factory=list)
    edges: list[dict[str, Any]] = field(default_factory=list)
    refs: list[dict[str, Any]] = field(default_factory=list)
    # The rows above by what their id hashes: a call made twice from one symbol is one edge
    # with two lines, and its id is hashed once (hashing every call site cost a quarter of
    # resolving).
    seen: dict[tuple[str | None, ...], dict[str, Any]] = field(default_factory=dict, repr=False)


@dataclass(slots=True)
class _Target:
    """Where a local name points: a file of the project (and a name in it), or a module."""

    path: str | None
    name: str | None = None
    module: str | None = None
    dir_files: tuple[str, ...] = ()  # a package of several files (Go, Java same package)


# A call not met before in its file (None in `made` is a call met that makes no row).
_UNSEEN: Any = object()

# Where a call points: (symbol key, None, None) settled; (None, files, owner) a guess by name;
# (None, None, None) outside the project.
Resolved = tuple[str | None, tuple[str, ...] | None, str | None]


def resolve(project_id: str, rel: str, graph: FileGraph, tree: Tree) -> GraphRows:
    rows = GraphRows(rel)
    source_file = file_entity_id(project_id, rel)
    classes: set[str] = set()
    defined: set[str] = set()
    for found in graph.definitions:
        qualified = found.qualified
        defined.add(qualified)
        if found.kind == "class":
            classes.add(qualified)
        key = symbol_key(project_id, rel, found.name, found.parent)
        rows.symbols.append({"entity_id": _symbol_id(key), "key": key, "name": qualified})
        _edge(rows, _DEFINES, source_file, key, found.line, qualified)

    names: dict[str, _Target] = {}  # local name -> what it is
    here = posixpath.dirname(rel)
    where = _import_base(graph, rel, here)
    module_keys: set[str] = set()
    for imp in graph.imports:
        first = imp.names[0][0] if imp.names else None
        targets = () if where is None else _files_of(tree, graph.language, where, imp.module, first)
        if targets:
            for path in targets:
                _edge(rows, _IMPORTS, source_file, file_key(project_id, path), imp.line, imp.module)
        else:
            module = _module_name(graph.language, imp.module)
            mkey = module_key(graph.language, module)
            if mkey not in module_keys:
                module_keys.add(mkey)
                rows.modules.append({"entity_id": _module_id(mkey), "key": mkey, "name": module})
            _edge(rows, _IMPORTS, source_file, mkey, imp.line, imp.module, kind="module")
        single = targets[0] if len(targets) == 1 else None
        package = _package(single)
        if imp.alias:
            names[imp.alias] = _Target(single, module=imp.module, dir_files=_package_files(targets))
        for name, local in imp.names:
            # `from pkg import mod` names a module file when there is one
            sub = _submodule(graph.language, here, imp.module, name, tree)
            if sub is not None:
                names[local] = _Target(sub, module=f"{imp.module}.{name}")
            elif package is not None:  # a package's __init__ may only re-export the name
                names[local] = _Target(None, name, dir_files=(package,))
            elif single is not None:
                names[local] = _Target(single, name)
            elif targets:
                names[local] = _Target(None, name, dir_files=_package_files(targets))
            else:
                names[local] = _Target(None, name, module=imp.module)

    same_package = _same_package(graph, rel)

    # A Python call by a bare name or through a module means a module-level symbol: the
    # guess is for the symbols without a class ("" owner), never a method of that name.
    top_level = "" if graph.language in ("python", *_JS) else None
    first_base: dict[str, str] = {}
    for inherit in graph.inherits:
        first_base.setdefault(inherit.cls, inherit.base)

    def instance_call(cls: str, name: str) -> Resolved:
        """A method called on an instance of `cls` (a class as the file writes it): settled
        when the file defines both; outside the project when the class is; else a guess by
        name owned by that class, among the files of its directory (where its bases usually
        are: the method may be inherited)."""
        owner = cls.rsplit(".", 1)[-1]
        if cls in classes:
            if f"{cls}.{name}" in defined:
                return symbol_key(project_id, rel, name, cls), None, None
            return None, (), owner
        found = names.get(cls) or names.get(cls.split(".", 1)[0])
        if found is None:
            if "." not in cls and graph.language == "python" and cls in _BUILTINS:
                return None, None, None
            return None, (), owner
        if found.path is not None:
            here = posixpath.dirname(found.path)
            return None, (f"{here}/",) if here else (), owner
        if not found.dir_files:
            return None, None, None  # a library's class: `Path`, `asyncio.Queue`
        return None, found.dir_files, owner

    def target_of(scope: str | None, receiver: str | None, name: str) -> Resolved:
        """(symbol key, None, None) when settled; (None, candidate files or `dir/` prefixes,
        empty for any; the class the target is a method of, if known) for a guess by name;
        (None, None, None) for a call outside the project (a library, a builtin)."""
        if receiver is None:
            if name in defined:
                return symbol_key(project_id, rel, name, None), None, None
            found = names.get(name)
            if found is not None and found.path is not None:
                return symbol_key(project_id, found.path, found.name or name, None), None, None
            if found is not None:
                return None, found.dir_files or None, top_level
            if graph.language == "python" and name in _BUILTINS:
                return None, None, None
            return None, same_package, top_level
        head = receiver.split(".", 1)[0]
        owner = scope.split(".", 1)[0] if scope else None
        if head in _SELF and owner in classes:
            if receiver == head and f"{owner}.{name}" in defined:
                return symbol_key(project_id, rel, name, owner), None, None
            return None, (), None
        if receiver == "super" and owner in first_base:
            return instance_call(first_base[owner], name)
        if receiver in classes:
            return symbol_key(project_id, rel, name, receiver), None, None
        found = names.get(receiver) or names.get(head)
        if found is None:
            return None, (), None  # a variable: `job.result()`
        if found.name is not None and found.path is not None:  # an imported class
            return symbol_key(project_id, found.path, name, found.name), None, None
        if found.path is not None and receiver in names:  # a module alias
            package = _package(found.path)
            if package is not None:  # `httpx.get()`: defined in the package or re-exported
                return None, (package,), top_level
            return symbol_key(project_id, found.path, name, None), None, None
        return None, found.dir_files or None, None

    calls_table = _CALLS
    # A file calls one name the same way from one scope many times: resolved once, then each
    # further call site is one more line of the same row: its `lines` here (None: a call no row
    # is kept for).
    made: dict[tuple[str | None, ...], list[int] | None] = {}
    # The entity each scope is, found once (a method makes many calls).
    sources: dict[str | None, str] = {}
    is_js = graph.language in _JS

    for call in graph.calls:
        scope, receiver, instance_of, name = call.scope, call.receiver, call.instance_of, call.name
        how = (scope, receiver, instance_of, name)
        lines = made.get(how, _UNSEEN)
        if lines is not _UNSEEN:
            if lines is not None:
                lines.append(call.line)
            continue
        if receiver == COMPUTED:
            key, candidates, owner = None, (), None
        elif instance_of is not None:
            key, candidates, owner = instance_call(instance_of, name)
        else:
            key, candidates, owner = target_of(scope, receiver, name)
        row: dict[str, Any] | None = None
        if candidates == () and is_js and name in _JS_BUILTIN_METHODS:
            pass  # `x.toString()`, `this.cache.has(k)`: a string's, a Map's…
        elif key is not None or candidates is not None:
            source = sources.get(scope)
            if source is None:
                source = sources[scope] = _symbol_or_file(project_id, rel, scope, source_file)
            if key is not None:
                row = _edge(rows, calls_table, source, key, call.line, name)
            else:
                row = _ref(rows, calls_table, source, name, call.line, candidates, owner)
        made[how] = row["lines"] if row is not None else None
    for inherit in graph.inherits:
        source = _symbol_or_file(project_id, rel, inherit.cls, source_file)
        receiver, _, name = inherit.base.replace("::", ".").rpartition(".")
        key, candidates, _ = target_of(None, receiver or None, name)
        if key is not None:
            _edge(rows, _INHERITS, source, key, inherit.line, inherit.base)
        elif candidates is not None:
            _ref(rows, _INHERITS, source, name, inherit.line, candidates)
    return rows


# A symbol's id, hashed once per key: a file's calls come from a few symbols, to a few others,
# many times each (hashing them again was most of resolving's time on kafka).
_symbol_id = functools.lru_cache(maxsize=1 << 16)(symbol_entity_id)


_module_id = functools.lru_cache(maxsize=1 << 12)(module_entity_id)


@functools.lru_cache(maxsize=1 << 14)
def _file_id(key: str) -> str:
    """A file's id from its key, hashed once: a directory's files import the same files."""
    return file_entity_id(*split_file_key(key))


def _symbol_or_file(project_id: str, rel: str, qualified: str | None, file_id: str) -> str:
    """The entity a call or a base sits in: its symbol, or the file at module level."""
    if not qualified:
        return file_id
    parent, _, name = qualified.rpartition(".")
    return _symbol_id(symbol_key(project_id, rel, name, parent or None))


def _edge(
    rows: GraphRows,
    table: str,
    source: str,
    target_key: str,
    line: int,
    name: str,
    kind: str | None = None,
) -> dict[str, Any]:
    """One edge per (source, target) of the file, with the lines it was seen on."""
    if kind == "module":
        target = _module_id(target_key)
    elif "#" in target_key:
        target = _symbol_id(target_key)
    else:
        target = _file_id(target_key)
    parts = (table, rows.path, source, target)
    known = rows.seen.get(parts)
    if known is not None:  # a function called twice by one symbol: one more line
        known["lines"].append(line)
        return known
    edge = {"table": table, "id": stable_id(*parts), "in": source, "out": target}
    edge |= {"target": target_key, "line": line, "name": name, "lines": [line]}
    rows.seen[parts] = edge
    rows.edges.append(edge)
    return edge


def _ref(
    rows: GraphRows,
    table: str,
    source: str,
    name: str,
    line: int,
    candidates: tuple[str, ...],
    owner: str | None = None,
) -> dict[str, Any]:
    parts = (
        ("ref", table, rows.path, source, name)
        if owner is None
        else ("ref", table, rows.path, source, owner, name)
    )
    known = rows.seen.get(parts)
    if known is not None:
        known["lines"].append(line)
        return known
    ref: dict[str, Any] = {"verb": table, "source": source, "name": name, "line": line}
    # Most references have one candidate entry (`dir/*`, the file's package): no set to sort.
    ref["paths"] = list(candidates) if len(candidates) < 2 else sorted(set(candidates))
    ref["id"] = stable_id(*parts)
    if owner is not None:  # the field is absent, not null, when there is none (the table's type)
        ref["owner"] = owner
    ref["lines"] = [line]
    rows.seen[parts] = ref
    rows.refs.append(ref)
    return ref


def guess(ref: dict[str, Any], candidates: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The symbols (rows with `path` and qualified `name`) a reference by name may mean: those
    in the files (`dir/` prefixes, `dir/*` directories) it could reach, or anywhere when it names
    none; when it knows its receiver's class, that class's method if one is among them."""
    paths = ref["paths"]
    allowed = [c for c in candidates if not paths or any(_reaches(c["path"], p) for p in paths)]
    owner = ref.get("owner")
    if owner is not None:  # "" for a module-level symbol
        owned = [c for c in allowed if c["name"] == f"{owner}.{ref['name']}".lstrip(".")]
        if owned:
            return owned
    return allowed


def _package(path: str | None) -> str | None:
    """`pkg/` for a Python package's `pkg/__init__.py` or a JavaScript/TypeScript barrel
    `pkg/index.ts`: the names it gives may be defined in it or re-exported from any module
    under it."""
    if path is None:
        return None
    base = posixpath.basename(path)
    barrel = base.endswith(_JS_SUFFIXES) and base.split(".", 1)[0] == "index"
    if base != "__init__.py" and not barrel:
        return None
    here = posixpath.dirname(path)
    return f"{here}/" if here else None  # the root's own: as a module


# --- where an import points, per language -------------------------------------------------------

_JS_SUFFIXES = (".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs", ".mts", ".cts", ".d.ts")


def _module_name(language: str, module: str) -> str:
    """The external module an import names: its top package (`redis.asyncio` -> `redis`,
    `@scope/pkg/sub` -> `@scope/pkg`, `std::fmt` -> `std`)."""
    if language == "python":
        return module.lstrip(".").split(".", 1)[0] or module
    if language in ("javascript", "typescript", "tsx"):
        parts = module.split("/")
        return "/".join(parts[:2]) if module.startswith("@") else parts[0]
    if language == "rust":
        return module.split("::", 1)[0]
    return module


def _first(tree: Tree, candidates: Iterable[str]) -> str | None:
    for candidate in candidates:
        normal = posixpath.normpath(candidate)
        if not normal.startswith("..") and tree.is_file(normal):
            return normal
    return None


def _python_bases(here: str, module: str, tree: Tree) -> tuple[tuple[str, ...], str]:
    """Directories a module path may start from, and the dotted rest. An absolute import
    starts at a source root: the project's root, `src`, or a directory above the file that is
    not itself a package (`import typing` in arq/jobs.py is the standard library's, not
    arq/typing.py). `here`: the importing file's directory."""
    if module.startswith("."):
        level = len(module) - len(module.lstrip("."))
        base = here
        for _ in range(level - 1):
            base = posixpath.dirname(base)
        return (base,), module[level:]
    return _python_roots(tree, here), module


@functools.lru_cache(maxsize=1 << 14)
def _python_roots(tree: Tree, here: str) -> tuple[str, ...]:
    """The source roots of a directory's absolute imports, found once per directory (each of
    its modules tried them all again)."""
    roots = []
    while here:
        if not tree.is_file(posixpath.join(here, "__init__.py")):
            roots.append(here)
        here = posixpath.dirname(here)
    return ("", "src", *roots)


def _python_file(here: str, module: str, tree: Tree) -> str | None:
    bases, rest = _python_bases(here, module, tree)
    parts = rest.replace(".", "/")
    for base in bases:
        found = _python_under(tree, base, parts)
        if found is not None:
            return found
    return None


@functools.lru_cache(maxsize=1 << 16)
def _python_under(tree: Tree, base: str, parts: str) -> str | None:
    """The module `parts` (`a/b`; "" for the package itself) under one source root, looked up
    once per root: the directories of a tree import the same modules (`import os` tried every
    root of every directory, a third of resolving ansible)."""
    stem = posixpath.join(base, parts) if parts else base
    if parts:
        return _first(tree, [f"{stem}.py", posixpath.join(stem, "__init__.py")])
    return _first(tree, [posixpath.join(stem, "__init__.py")])


def _import_base(graph: FileGraph, rel: str, here: str) -> str | None:
    """What a file's imports resolve from, the same for the files of a directory (each import
    is resolved once per tree and base: a third of resolving kafka went to the same Java
    imports): the file's directory (Python, JavaScript/TypeScript), the file (Rust), "" (Go:
    by the import path alone), Java's source root (`a/src/main/java/`), None when the file has
    no source root (a Java file without a package, or in a directory other than its
    package's)."""
    language = graph.language
    if language == "rust":
        return rel
    if language == "go":
        return ""
    if language == "java":
        root = _java_root(here, graph.package) if graph.package else None
        return None if root is None else f"{root}/" if root else ""
    return here


@functools.lru_cache(maxsize=1 << 14)
def _files_of(
    tree: Tree, language: str, where: str, module: str, first: str | None
) -> tuple[str, ...]:
    """The files of the project an import of `module` names from `where` (`_import_base`),
    `first` the first name it imports, if any; none: outside the project."""
    if language == "python":
        found = _python_file(where, module, tree)
        return (found,) if found else ()
    if language in ("javascript", "typescript", "tsx"):
        if not module.startswith("."):
            return ()
        stem = posixpath.join(where, module)
        js_candidates = [stem] + [stem + s for s in _JS_SUFFIXES]
        js_candidates += [posixpath.join(stem, "index" + s) for s in _JS_SUFFIXES]
        # `./x.js` written in TypeScript sources names x.ts
        js_candidates += [stem.rsplit(".", 1)[0] + s for s in _JS_SUFFIXES if "." in module[2:]]
        found = _first(tree, js_candidates)
        return (found,) if found else ()
    if language == "go":
        parts = module.split("/")
        for start in range(len(parts)):
            files = [
                f
                for f in tree.files_in("/".join(parts[start:]), ".go")
                if not f.endswith("_test.go")
            ]
            if files:
                return tuple(files)
        return ()
    if language == "rust":
        found = _rust_file(where, module, tree)
        return (found,) if found else ()
    if language == "java":
        stem = where + module.replace(".", "/")
        if first is not None:
            found = _first(tree, [f"{stem}/{first}.java", f"{stem}.java"])
            return (found,) if found else ()
        return tuple(tree.files_in(stem, ".java"))
    return ()


def _submodule(language: str, here: str, module: str, name: str, tree: Tree) -> str | None:
    """`from pkg import mod` where mod is a file of the package (Python only), from the
    importing file's directory `here`."""
    if language != "python":
        return None
    joined = f"{module}.{name}" if module.strip(".") else module + name
    found = _files_of(tree, language, here, joined, None)
    return found[0] if found else None


def _rust_file(rel: str, module: str, tree: Tree) -> str | None:
    parts = module.split("::")
    here = posixpath.dirname(rel)
    stem = posixpath.splitext(posixpath.basename(rel))[0]
    if parts[0] == "crate":
        base = here
        while base and not tree.is_file(posixpath.join(posixpath.dirname(base), "Cargo.toml")):
            base = posixpath.dirname(base)
        parts = parts[1:]
    elif parts[0] in ("self", "super"):
        base = here if stem in ("mod", "lib", "main") else posixpath.join(here, stem)
        while parts and parts[0] == "super":
            base = posixpath.dirname(base)
            parts = parts[1:]
        if parts and parts[0] == "self":
            parts = parts[1:]
    else:
        return None
    # the longest prefix of the path that is a file: `crate::a::b::C` may be a::b's item C
    for end in range(len(parts), 0, -1):
        path = posixpath.join(base, *parts[:end])
        found = _first(tree, [f"{path}.rs", f"{path}/mod.rs"])
        if found:
            return found
    return None


def _java_root(here: str, package: str) -> str | None:
    suffix = package.replace(".", "/")
    if here == suffix:
        return ""
    return here[: -len(suffix) - 1] if here.endswith("/" + suffix) else None


def _same_package(graph: FileGraph, rel: str) -> tuple[str, ...]:
    """Where the names a Go or Java file uses unqualified are: its own package, the files of
    its directory (`dir/*`)."""
    if graph.language in ("go", "java"):
        return (_in_dir(posixpath.dirname(rel)),)
    return ()


def _in_dir(here: str) -> str:
    """`dir/*`: the files directly in a directory (a Go or Java package), as one entry of a
    reference's paths: kafka's packages hold hundreds of files, listed on every reference."""
    return f"{here}/*" if here else "*"


def _package_files(files: tuple[str, ...]) -> tuple[str, ...]:
    """A package's files as a reference's paths: `dir/*` when they share one directory."""
    dirs = {posixpath.dirname(f) for f in files}
    return (_in_dir(dirs.pop()),) if len(files) > 1 and len(dirs) == 1 else tuple(files)


def _reaches(path: str, where: str) -> bool:
    """Whether a reference's paths entry takes in this file: the file itself, a `dir/`
    prefix (a package's modules) or `dir/*` (the files directly in dir)."""
    if where.endswith("*"):
        return posixpath.dirname(path) == where[:-2] if where != "*" else "/" not in path
    return path == where or (where.endswith("/") and path.startswith(where))
