"""The pure stages of the code graph: a file's definitions, imports, calls and bases, resolved
against a project's files. TypeScript on node-pty's real source (vendored, MIT); Go, Rust and
Java on small files in their usual layouts."""

from __future__ import annotations

from pathlib import Path

from workers.stages.codegraph import DiskTree, file_graph, file_graph_of
from workers.stages.codegraph.extract import extract
from workers.stages.codegraph.resolve import GraphRows, guess, resolve

NODE_PTY = Path(__file__).parent / "data" / "node-pty"


class Files:
    """A project's layout as a set of paths."""

    def __init__(self, *paths: str) -> None:
        self.paths = set(paths)

    def is_file(self, rel: str) -> bool:
        return rel in self.paths

    def files_in(self, rel_dir: str, suffix: str) -> list[str]:
        prefix = f"{rel_dir}/" if rel_dir else ""
        return sorted(
            p
            for p in self.paths
            if p.startswith(prefix) and "/" not in p[len(prefix) :] and p.endswith(suffix)
        )


def _edges(rows: GraphRows, table: str) -> list[tuple[str, str, int]]:
    """(source key's tail, target key without the project, line) of one kind of edge."""
    return [
        (e["name"], e["target"].split(":", 1)[1], e["line"])
        for e in rows.edges
        if e["table"] == table
    ]


def _resolved(language: str, path: str, text: str, files: Files) -> GraphRows:
    facts = extract(text, language)
    assert facts is not None
    return resolve("p", path, facts, files)


def test_typescript_in_node_pty() -> None:
    rel = "src/unixTerminal.ts"
    rows = file_graph("p", NODE_PTY, rel, (NODE_PTY / rel).read_text(), "typescript")
    assert _edges(rows, "imports") == [
        ("net", "net", 6),
        ("path", "path", 7),
        ("./terminal", "src/terminal.ts", 8),
        ("./interfaces", "src/interfaces.ts", 9),
        ("./types", "src/types.ts", 10),
        ("./utils", "src/utils.ts", 11),
    ]
    assert [m["key"] for m in rows.modules] == ["typescript:net", "typescript:path"]
    assert _edges(rows, "inherits") == [("Terminal", "src/terminal.ts#Terminal", 37)]
    assert _edges(rows, "calls") == [
        ("assign", "src/utils.ts#assign", 72),
        ("_sanitizeEnv", "src/unixTerminal.ts#UnixTerminal._sanitizeEnv", 75),
        ("PipeSocket", "src/unixTerminal.ts#PipeSocket", 116),
        ("PipeSocket", "src/unixTerminal.ts#PipeSocket", 206),
        ("kill", "src/unixTerminal.ts#UnixTerminal.kill", 249),
    ]
    rel = "src/terminal.ts"
    rows = file_graph("p", NODE_PTY, rel, (NODE_PTY / rel).read_text(), "typescript")
    assert _edges(rows, "inherits") == [("ITerminal", "src/interfaces.ts#ITerminal", 24)]


def test_javascript_require_and_new() -> None:
    text = (
        "const { parse } = require('./lib/parse');\n"
        "const util = require('./lib/util.js');\n"
        "class Reader extends util.Base {\n"
        "  read(s) { return parse(s) && this.close(); }\n"
        "  close() { return new util.Buffer(); }\n"
        "}\n"
    )
    files = Files("index.js", "lib/parse.js", "lib/util.js")
    rows = _resolved("javascript", "index.js", text, files)
    assert _edges(rows, "imports") == [
        ("./lib/parse", "lib/parse.js", 1),
        ("./lib/util.js", "lib/util.js", 2),
    ]
    assert _edges(rows, "calls") == [
        ("parse", "lib/parse.js#parse", 4),
        ("close", "index.js#Reader.close", 4),
        ("Buffer", "lib/util.js#Buffer", 5),
    ]
    assert _edges(rows, "inherits") == [("util.Base", "lib/util.js#Base", 3)]


def test_go_package_imports_and_methods() -> None:
    text = (
        "package server\n\n"
        'import (\n\t"fmt"\n\t"example.com/app/internal/store"\n)\n\n'
        "type Server struct {\n\tstore.Base\n\tname string\n}\n\n"
        "func (s *Server) Run() error {\n\ts.listen()\n"
        "\treturn store.Open(fmt.Sprint(s.name))\n}\n\n"
        "func (s *Server) listen() { helper() }\n"
    )
    files = Files("server/server.go", "server/util.go", "internal/store/store.go", "go.mod")
    rows = _resolved("go", "server/server.go", text, files)
    assert _edges(rows, "imports") == [
        ("fmt", "fmt", 4),
        ("example.com/app/internal/store", "internal/store/store.go", 5),
    ]
    # A package of one file settles its names; `fmt` is outside the project.
    assert _edges(rows, "calls") == [
        ("listen", "server/server.go#Server.listen", 14),
        ("Open", "internal/store/store.go#Open", 15),
    ]
    assert _edges(rows, "inherits") == [("store.Base", "internal/store/store.go#Base", 9)]
    # A name of the file's own package is guessed among its other files when read.
    assert [(r["name"], r["paths"]) for r in rows.refs] == [("helper", ["server/*"])]
    assert [d["key"] for d in rows.symbols] == [
        "p:server/server.go#Server",
        "p:server/server.go#Server.Run",
        "p:server/server.go#Server.listen",
    ]


def test_rust_crate_uses_and_impls() -> None:
    text = (
        "use crate::store::{open, Store as Db};\nuse std::fmt;\n\n"
        "pub struct Server { db: Db }\n\n"
        "impl fmt::Display for Server {\n"
        "    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result { self.name(); Ok(()) }\n}\n\n"
        "impl Server {\n    fn name(&self) -> String { open(); Db::new(); String::new() }\n}\n"
    )
    files = Files("Cargo.toml", "src/lib.rs", "src/server.rs", "src/store.rs")
    rows = _resolved("rust", "src/server.rs", text, files)
    assert _edges(rows, "imports") == [
        ("crate::store", "src/store.rs", 1),
        ("std", "std", 2),
    ]
    assert _edges(rows, "calls") == [
        ("name", "src/server.rs#Server.name", 7),
        ("open", "src/store.rs#open", 11),
        ("new", "src/store.rs#Store.new", 11),
    ]
    assert [d["key"] for d in rows.symbols] == [
        "p:src/server.rs#Server",
        "p:src/server.rs#Server.fmt",
        "p:src/server.rs#Server.name",
    ]


def test_java_packages_and_inheritance() -> None:
    text = (
        "package com.acme.app;\n\n"
        "import com.acme.store.Store;\nimport java.util.List;\n\n"
        "public class Server extends Base implements Runnable {\n"
        "    private final Store store = new Store();\n"
        "    public void run() { this.listen(); Store.open(); new Helper(); }\n"
        "    void listen() {}\n}\n"
    )
    files = Files(
        "src/main/java/com/acme/app/Server.java",
        "src/main/java/com/acme/app/Base.java",
        "src/main/java/com/acme/app/Helper.java",
        "src/main/java/com/acme/store/Store.java",
    )
    rows = _resolved("java", "src/main/java/com/acme/app/Server.java", text, files)
    assert _edges(rows, "imports") == [
        ("com.acme.store", "src/main/java/com/acme/store/Store.java", 3),
        ("java.util", "java.util", 4),
    ]
    assert _edges(rows, "calls") == [
        ("Store", "src/main/java/com/acme/store/Store.java#Store", 7),
        ("listen", "src/main/java/com/acme/app/Server.java#Server.listen", 8),
        ("open", "src/main/java/com/acme/store/Store.java#Store.open", 8),
    ]
    same_package = ["src/main/java/com/acme/app/*"]
    assert [(r["verb"], r["name"], r["paths"]) for r in rows.refs] == [
        ("calls", "Helper", same_package),
        ("inherits", "Base", same_package),
        ("inherits", "Runnable", same_package),
    ]
    # `dir/*` takes in the files of that directory, not of its subdirectories.
    symbols = [
        {"key": f"p:{path}#Helper", "path": path, "name": "Helper"}
        for path in (
            "src/main/java/com/acme/app/Helper.java",
            "src/main/java/com/acme/app/x/Helper.java",
        )
    ]
    assert [c["path"] for c in guess(rows.refs[0], symbols)] == [
        "src/main/java/com/acme/app/Helper.java"
    ]


def test_python_module_names_and_disk_layout(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "typing.py").write_text("")
    (tmp_path / "pkg" / "jobs.py").write_text("")
    text = (
        "from typing import cast\nfrom . import jobs\nfrom .jobs import Job as J\n"
        "LIMIT = 3\n\nclass Worker(J):\n    def run(self):\n        jobs.go(cast(int, LIMIT))\n"
        "        return self.stop() or print(1)\n\n    def stop(self): ...\n"
    )
    rows = file_graph("p", tmp_path, "pkg/worker.py", text, "python")
    # `typing` is the standard library's, not pkg/typing.py: pkg is a package, not a root.
    assert _edges(rows, "imports") == [
        ("typing", "typing", 1),
        (".", "pkg/__init__.py", 2),
        (".jobs", "pkg/jobs.py", 3),
    ]
    assert _edges(rows, "calls") == [
        ("go", "pkg/jobs.py#go", 8),
        ("stop", "pkg/worker.py#Worker.stop", 9),
    ]
    assert _edges(rows, "inherits") == [("J", "pkg/jobs.py#Job", 6)]
    assert [d["name"] for d in rows.symbols] == ["LIMIT", "Worker", "Worker.run", "Worker.stop"]
    assert rows.refs == []  # `cast` is a library's, `print` a builtin
    assert DiskTree(tmp_path).files_in("pkg", ".py") == [
        "pkg/__init__.py",
        "pkg/jobs.py",
        "pkg/typing.py",
    ]


def test_python_calls_on_instances_packages_and_super(tmp_path: Path) -> None:
    """A method called on an instance the file types plainly (a parameter's annotation,
    `x = Cls()`, `with Cls() as x`, `super()`), and a name a package's __init__ re-exports:
    guesses by name that `guess` narrows to the one symbol meant."""
    files = {
        "pkg/__init__.py": "from ._client import Client\nfrom ._api import get\n",
        "pkg/_client.py": (
            "class Base:\n    def close(self): ...\n\n"
            "class Client(Base):\n    def send(self): ...\n\n    def get(self): ...\n"
        ),
        "pkg/_api.py": (
            "from ._client import Client\n\n"
            "def get(url):\n    with Client() as c:\n        return c.get()\n"
        ),
        "pkg/_sub.py": (
            "from ._client import Client\n\n"
            "class Sub(Client):\n    def send(self):\n        return super().send()\n"
        ),
        "tests/test_x.py": (
            "import pkg\nfrom pathlib import Path\n\n"
            "def test_it(client: pkg.Client, p: Path | None):\n"
            "    pkg.get('u')\n    c = pkg.Client()\n    c.send()\n    c.close()\n"
            "    client.get()\n    return p.read_text()\n"
        ),
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text(text)
    graph = file_graph_of("p", tmp_path, sorted(files))
    symbols = [
        {"key": e["target"], "path": rows.path, "name": e["name"]}
        for rows in graph
        for e in rows.edges
        if e["table"] == "defines"
    ]
    meant = {
        (rows.path, ref["line"], ref["name"], ref.get("owner")): [
            c["key"].split(":", 1)[1]
            for c in guess(ref, [s for s in symbols if s["name"].endswith(ref["name"])])
        ]
        for rows in graph
        for ref in rows.refs
    }
    assert meant == {
        ("pkg/_api.py", 5, "get", "Client"): ["pkg/_client.py#Client.get"],
        ("pkg/_sub.py", 5, "send", "Client"): ["pkg/_client.py#Client.send"],
        ("tests/test_x.py", 5, "get", ""): ["pkg/_api.py#get"],
        ("tests/test_x.py", 6, "Client", ""): ["pkg/_client.py#Client"],
        ("tests/test_x.py", 7, "send", "Client"): ["pkg/_client.py#Client.send"],
        # inherited: no Client.close, the one close under the package
        ("tests/test_x.py", 8, "close", "Client"): ["pkg/_client.py#Base.close"],
        ("tests/test_x.py", 9, "get", "Client"): ["pkg/_client.py#Client.get"],
    }
    # `Client()` in pkg/_api.py is settled by its import; `p.read_text()` is pathlib's.
    api = next(rows for rows in graph if rows.path == "pkg/_api.py")
    assert _edges(api, "calls") == [("Client", "pkg/_client.py#Client", 4)]


def test_typescript_barrels_and_builtin_methods() -> None:
    """`z.number()` through `import * as z from "./v4/index.js"` may be any module-level
    `number` under v4/ (a barrel re-exports); `x.toString()`, `this.m.has()` on values the file
    does not type are no guess."""
    text = (
        'import * as z from "./v4/index.js";\n'
        'import { union } from "./v4/index.js";\n'
        "export function f(x: unknown) {\n"
        "  return z.number() && union() && x.toString() && this.m.has(x) && x.parse();\n"
        "}\n"
    )
    files = Files("src/main.ts", "src/v4/index.ts", "src/v4/schemas.ts")
    rows = _resolved("typescript", "src/main.ts", text, files)
    assert _edges(rows, "calls") == []
    assert [(r["name"], r["paths"], r.get("owner"), r["line"]) for r in rows.refs] == [
        ("number", ["src/v4/"], "", 4),
        ("union", ["src/v4/"], "", 4),
        ("parse", [], None, 4),
    ]
    symbols = [
        {"key": "p:src/v4/schemas.ts#number", "path": "src/v4/schemas.ts", "name": "number"},
        {"key": "p:src/v4/schemas.ts#Z.number", "path": "src/v4/schemas.ts", "name": "Z.number"},
        {"key": "p:src/other.ts#number", "path": "src/other.ts", "name": "number"},
    ]
    assert [c["key"] for c in guess(rows.refs[0], symbols)] == ["p:src/v4/schemas.ts#number"]
