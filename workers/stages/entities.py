"""Canonical entities: one real thing (a file, a command, a tool, a URL, an error), one key.

Agents name the same thing in many ways (``./src/a.py``, ``src/../src/a.py``, an absolute path;
``cd x && FOO=1 uv run pytest``; ``mcp__github__create_pr``). Every function here returns an
:class:`Entity` whose ``key`` is canonical and whose ``raw`` keeps the form that was seen, so a
caller can store it as an alias. Pure functions: no file system access unless asked for.
"""

from __future__ import annotations

import ntpath
import os
import posixpath
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from blake3 import blake3

from memoryd.ids import file_key
from memoryd.vocabulary import COMMAND, ERROR, FILE, TOOL, URL


@dataclass(frozen=True, slots=True)
class Entity:
    """A canonical thing an action touched.

    ``kind``: file | command | tool | url | error. ``key``: the canonical key (unique per kind).
    ``raw``: the form seen in the transcript (an alias). ``name``: a short display name.
    ``project_id``: the watched project a file belongs to, if any.
    """

    kind: str
    key: str
    raw: str
    name: str
    project_id: str | None = None


@dataclass(frozen=True, slots=True)
class Project:
    """A watched project: its id and the absolute path of its root."""

    id: str
    root: str


ProjectsLike = Iterable["Project | tuple[str, str]"]


def as_projects(projects: ProjectsLike | None) -> tuple[Project, ...]:
    """Accept ``Project`` objects or ``(project_id, root)`` pairs; roots are normalised."""
    out: list[Project] = []
    for p in projects or ():
        pid, root = (p.id, p.root) if isinstance(p, Project) else p
        out.append(Project(pid, normalize_path(root)))
    # Longest root first, so a nested project wins over the one containing it.
    return tuple(sorted(out, key=lambda p: len(p.root), reverse=True))


# --------------------------------------------------------------------------------------------
# Files

_WINDOWS_ABS = re.compile(r"^[A-Za-z]:[\\/]")


def normalize_path(path: str, cwd: str | None = None) -> str:
    """Resolve ``path`` against ``cwd`` and normalise ``.``/``..``/``//`` (no file system use).

    Windows paths (``C:\\x\\y``) are normalised with forward slashes. ``~`` is left as is: the
    home directory of the machine that wrote the transcript is not known here.
    """
    p = path.strip()
    if _WINDOWS_ABS.match(p) or (cwd and _WINDOWS_ABS.match(cwd)):
        if cwd and not _WINDOWS_ABS.match(p) and not p.startswith(("\\", "/")):
            p = ntpath.join(cwd, p)
        return ntpath.normpath(p).replace("\\", "/")
    if cwd and not p.startswith(("/", "~")):
        p = _join_relative(cwd, p) if not cwd.startswith(("/", "~")) else posixpath.join(cwd, p)
    if not p:
        return p
    norm = posixpath.normpath(p)
    # normpath keeps a leading "//" (POSIX allows it to mean something); transcripts never do.
    return "/" + norm.lstrip("/") if norm.startswith("//") else norm


def _join_relative(cwd: str, path: str) -> str:
    """A relative path under a relative working directory (an anonymised transcript strips
    the same leading folders off both): a path that already starts with the directory, or
    with its last two or more folders, is not put under it a second time."""
    c = posixpath.normpath(cwd).split("/")
    p = posixpath.normpath(path).split("/")
    if p[: len(c)] == c:
        return path
    for n in range(len(c) - 1, 1, -1):
        if p[:n] == c[-n:]:
            return posixpath.join(*c[:-n], path)
    return posixpath.join(cwd, path)


def canonical_file(
    path: str | None,
    cwd: str | None = None,
    projects: ProjectsLike | None = None,
    *,
    resolve_symlinks: bool = False,
    home: str | None = None,
) -> Entity | None:
    """The file entity for ``path`` as seen from ``cwd``.

    Inside a watched project the key is ``"<project_id>:<path relative to the root>"`` (the same
    key the code indexer uses), otherwise the absolute normalised path. ``resolve_symlinks``
    follows symlinks for paths that exist on this machine (off by default: it is I/O).
    ``~/…`` is expanded with ``home``; with no home known it stays ``~/…`` (the key says whose
    home: the transcript writer's), and ``~user/…`` names no file (None).
    """
    if not path or not path.strip():
        return None
    raw = path
    path = expand_home(path, home) or (path if path.startswith("~/") else None)
    if path is None:
        return None
    abs_path = normalize_path(path, cwd)
    if resolve_symlinks and abs_path.startswith("/") and os.path.exists(abs_path):
        abs_path = os.path.realpath(abs_path)
    name = posixpath.basename(abs_path.rstrip("/")) or abs_path
    for project in as_projects(projects):
        rel = _relative_to(abs_path, project.root)
        if rel is not None:
            return Entity(FILE, file_key(project.id, rel), raw, name, project.id)
    return Entity(FILE, abs_path, raw, name)


def expand_home(path: str, home: str | None) -> str | None:
    """``~`` and ``~/…`` with ``home``; None for those with no home known and for ``~user``
    (another user's home is not known either); other paths as they are."""
    if not path.startswith("~"):
        return path
    if home and (path == "~" or path.startswith("~/")):
        return home + path[1:]
    return None


def _relative_to(path: str, root: str) -> str | None:
    if path == root:
        return "."
    prefix = root if root.endswith("/") else root + "/"
    return path[len(prefix) :] if path.startswith(prefix) else None


# --------------------------------------------------------------------------------------------
# Commands

# Separators between simple commands; redirections are not separators.
_REDIRECTS = frozenset({">", ">>", "<", "<<", "<<<", ">&", "<&", "&>", "&>>", ">|", "<>"})
_PUNCT = set("();<>|&\n")
# Words that prefix a command without being the program that runs.
_KEYWORDS = frozenset(
    {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "esac", "{", "}", "!"}
)
_SKIP_WHOLE = frozenset({"for", "select", "case", "function", "in"})
# Builtins that run no program (stripped like `cd`; `echo` and friends are kept).
_NOT_PROGRAMS = frozenset(
    [
        "cd",
        "pushd",
        "popd",
        "export",
        "unset",
        "set",
        "source",
        ".",
        "true",
        "false",
        ":",
        "local",
        "declare",
        "typeset",
        "alias",
        "unalias",
        "trap",
        "shopt",
        "ulimit",
        "umask",
        "wait",
        "[",
        "[[",
        "]]",
        "test",
        "return",
        "exit",
        "break",
        "continue",
        "eval",
        "read",
    ]
)
# Wrappers that run the command after their own options; value = options taking an argument.
_WRAPPERS: dict[str, frozenset[str]] = {
    "env": frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}),
    "sudo": frozenset({"-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "-T"}),
    "doas": frozenset({"-u", "-C"}),
    "time": frozenset({"-f", "-o", "--format", "--output"}),
    "nohup": frozenset(),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "-n", "-p"}),
    "exec": frozenset({"-a"}),
    "command": frozenset(),
    "builtin": frozenset(),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "caffeinate": frozenset({"-t", "-w"}),
}
# `timeout 10 cmd`, `xargs -n1 cmd`: after options, one positional argument (timeout) or none.
_POSITIONAL_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "timeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), 1),
    "xargs": (frozenset({"-I", "-i", "-n", "-P", "-L", "-d", "-E", "-s", "-a"}), 0),
}
# Runners whose real program follows a subcommand: `uv run pytest`, `npx tsc`.
_RUNNERS: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {
    "uv": (
        ("run", "tool run"),
        frozenset(
            [
                "--with",
                "--python",
                "-p",
                "--directory",
                "--project",
                "--package",
                "--extra",
                "--group",
                "--env-file",
                "--from",
                "--index",
            ]
        ),
    ),
    "uvx": ((), frozenset({"--with", "--python", "-p", "--from", "--index"})),
    "npx": ((), frozenset({"-p", "--package"})),
    "bunx": ((), frozenset()),
    "pnpm": (("exec", "dlx"), frozenset()),
    "yarn": (("dlx", "exec"), frozenset()),
    "poetry": (("run",), frozenset()),
    "pipenv": (("run",), frozenset()),
    "pdm": (("run",), frozenset()),
    "hatch": (("run",), frozenset()),
}
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "fish"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
_HEREDOC = re.compile(r"<<-?[ \t]*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")


def command_programs(command: str | Sequence[str]) -> list[tuple[str, str]]:
    """The programs a shell command line actually runs, in order, without duplicates.

    Returns ``(program, segment)`` pairs: the program's base name and the simple command it was
    found in. Strips ``env``/``VAR=…``/``sudo``/``time``/``nohup``/``cd …``, splits pipelines
    and ``&&``/``||``/``;`` chains, looks into ``bash -c '…'`` and ``$(…)``, and unwraps
    runners (``uv run pytest`` runs ``pytest``). Unparseable input falls back to its first word.
    """
    if not isinstance(command, str):
        argv = [str(a) for a in command]
        return _dedupe(_programs_of_argv(argv) if argv else [])
    try:
        tokens = _tokenize(_unglue_substitutions(_strip_heredocs(command)))
    except ValueError:
        return _dedupe(_fallback(command))
    return _dedupe(_programs_of_tokens(tokens))


def canonical_commands(command: str | Sequence[str]) -> list[Entity]:
    """One command entity per program run (key = program name, raw = its simple command)."""
    return [Entity(COMMAND, prog, seg, prog) for prog, seg in command_programs(command)]


def _strip_heredocs(s: str) -> str:
    """Drop here-document bodies: their lines are data, not commands."""
    while True:
        m = _HEREDOC.search(s)
        if not m:
            return s
        line_end = s.find("\n", m.end())
        if line_end < 0:
            return s[: m.start()] + s[m.end() :]
        close = re.compile(rf"^[ \t]*{re.escape(m.group(2))}[ \t]*$", re.M)
        end = close.search(s, line_end + 1)
        body_end = end.end() if end else len(s)
        s = s[: m.start()] + s[m.end() : line_end] + s[body_end:]


# --------------------------------------------------------------------------------------------
# Files a shell command reads, writes or names

READ, WRITE, NAME = "read", "write", "name"
_STRENGTH = {NAME: 0, READ: 1, WRITE: 2}


@dataclass(frozen=True, slots=True)
class FileUse:
    """A file a shell command touches: ``access`` is read | write | name (only named, e.g. an
    argument of `pytest` or `git diff`, whose effect on the file is not known)."""

    access: str
    entity: Entity


@dataclass(frozen=True, slots=True)
class _Spec:
    """How a program treats its arguments.

    ``access``: what it does to its path operands. ``values``: options followed by a value
    (``-n 20``), with how many words they take. ``patterns``: leading operands that are not
    paths (a grep pattern, a sed script) unless one of ``pattern_options`` supplied it.
    ``last``: access of the last operand when it differs (`cp a b` writes b). ``strict``:
    every operand is a path, whatever it looks like (`rm build`). ``writes``/``reads``:
    options whose value is a file written/read (`sort -o out`). ``bare``: with no operand and
    no pipe into it, the program reads its working directory (`ls`, `rg x`).
    """

    access: str
    values: dict[str, int] = field(default_factory=dict)
    patterns: int = 0
    pattern_options: frozenset[str] = frozenset()
    last: str | None = None
    strict: bool = True
    writes: frozenset[str] = frozenset()
    reads: frozenset[str] = frozenset()
    bare: bool = False
    in_place: bool = False  # `-i`/`--in-place` turns reading into writing (sed)


def _v(*options: str) -> dict[str, int]:
    return dict.fromkeys(options, 1)


_GREP = _Spec(
    READ,
    _v("-e", "-f", "-m", "-A", "-B", "-C", "-d", "-D", "--regexp", "--file", "--include")
    | _v("--exclude", "--exclude-dir", "--max-count", "--label", "--context"),
    patterns=1,
    pattern_options=frozenset({"-e", "-f", "--regexp", "--file"}),
)
_RG = _Spec(
    READ,
    _v("-e", "-f", "-g", "-t", "-T", "-m", "-A", "-B", "-C", "-M", "-j", "-r", "-E", "-d")
    | _v("--regexp", "--file", "--glob", "--iglob", "--type", "--type-not", "--type-add")
    | _v("--max-count", "--max-columns", "--threads", "--replace", "--sort", "--sortr")
    | _v("--max-depth", "--colors", "--encoding", "--pre", "--ignore-file", "--context"),
    patterns=1,
    pattern_options=frozenset({"-e", "-f", "--regexp", "--file", "--files", "--type-list"}),
    bare=True,
)
_READERS = _Spec(READ)
_SPECS: dict[str, _Spec] = {
    **dict.fromkeys(
        [
            "cat",
            "tac",
            "less",
            "more",
            "wc",
            "file",
            "stat",
            "strings",
            "hexdump",
            "xxd",
            "od",
            "md5sum",
            "md5",
            "sha1sum",
            "sha256sum",
            "shasum",
            "cksum",
            "diff",
            "cmp",
            "bat",
            "readlink",
            "realpath",
            "column",
            "comm",
            "paste",
            "fold",
            "iconv",
            "base64",
            "source",
            ".",
            "uniq",
        ],
        _READERS,
    ),
    **dict.fromkeys(["head", "tail"], _Spec(READ, _v("-n", "-c", "--lines", "--bytes"))),
    "cut": _Spec(READ, _v("-d", "-f", "-c", "-b", "--delimiter", "--fields")),
    "nl": _Spec(READ, _v("-b", "-s", "-w", "-v", "-i", "-n", "-d", "-l")),
    "strings": _Spec(READ, _v("-n", "-t", "--bytes")),
    "sort": _Spec(READ, _v("-k", "-t", "-T", "-S", "-o", "--output"), writes=frozenset({"-o"})),
    "ls": _Spec(READ, _v("-I", "--ignore", "-w", "-T"), bare=True),
    "tree": _Spec(READ, _v("-L", "-I", "-P", "-o"), writes=frozenset({"-o"}), bare=True),
    "du": _Spec(READ, _v("-d", "--max-depth", "-B"), bare=True),
    "jq": _Spec(
        READ,
        _v("--indent", "-f", "--from-file") | dict.fromkeys(["--arg", "--argjson"], 2),
        patterns=1,
        pattern_options=frozenset({"-f", "--from-file"}),
        reads=frozenset({"-f", "--from-file"}),
    ),
    **dict.fromkeys(["grep", "egrep", "fgrep", "zgrep"], _GREP),
    **dict.fromkeys(["rg", "ag", "ack"], _RG),
    "sed": _Spec(
        READ,
        _v("-e", "-f", "-l", "--expression", "--file"),
        patterns=1,
        pattern_options=frozenset({"-e", "-f", "--expression", "--file"}),
        reads=frozenset({"-f", "--file"}),
        in_place=True,
    ),
    **dict.fromkeys(
        ["awk", "gawk", "mawk"],
        _Spec(READ, _v("-f", "-v", "-F"), 1, frozenset({"-f"}), reads=frozenset({"-f"})),
    ),
    **dict.fromkeys(["touch", "rm", "rmdir", "unlink", "shred", "tee"], _Spec(WRITE, _v("-r"))),
    "mkdir": _Spec(WRITE, _v("-m", "--mode")),
    "truncate": _Spec(WRITE, _v("-s", "-r", "--size")),
    **dict.fromkeys(["chmod", "chown", "chgrp"], _Spec(WRITE, _v("--reference"), patterns=1)),
    "mv": _Spec(WRITE, _v("-t", "-S"), writes=frozenset({"-t"})),
    **dict.fromkeys(
        ["cp", "install", "rsync"],
        _Spec(READ, _v("-t", "-S", "-m", "-o", "-g", "-e"), last=WRITE, writes=frozenset({"-t"})),
    ),
    "ln": _Spec(NAME, _v("-t", "-S"), last=WRITE, writes=frozenset({"-t"})),
    "python": _Spec(NAME, _v("-c", "-m", "-W", "-X"), strict=False),
    "node": _Spec(NAME, _v("-e", "--eval", "-p", "--print", "-r", "--require"), strict=False),
    "pytest": _Spec(
        NAME,
        _v("-k", "-m", "-p", "-c", "-o", "-W", "-n", "--deselect", "--rootdir", "--tb")
        | _v("--maxfail", "--basetemp", "--junitxml", "--confcutdir", "--ignore"),
        strict=False,
    ),
    "curl": _Spec(
        NAME,
        _v("-o", "--output", "-d", "--data", "-H", "--header", "-X", "--request", "-u", "-A")
        | _v("-e", "-b", "-c", "-F", "--form", "-T", "--upload-file", "--data-binary", "-w"),
        strict=False,
        writes=frozenset({"-o", "--output"}),
        reads=frozenset({"-T", "--upload-file"}),
    ),
    "wget": _Spec(
        NAME,
        _v("-O", "-P", "-o", "--output-document"),
        strict=False,
        writes=frozenset({"-O", "--output-document"}),
    ),
}
for _alias, _name in (("python3", "python"), ("py.test", "pytest"), ("gsed", "sed")):
    _SPECS[_alias] = _SPECS[_name]
# Programs whose operands are names (packages, scripts, hosts, text), never files: only
# words after `--` are looked at, as for any program.
_NO_PATHS = frozenset(
    [
        "echo",
        "printf",
        "npm",
        "pnpm",
        "yarn",
        "bun",
        "pip",
        "pip3",
        "uv",
        "uvx",
        "brew",
        "apt",
        "apt-get",
        "dnf",
        "yum",
        "cargo",
        "go",
        "gem",
        "gh",
        "docker",
        "kubectl",
        "kill",
        "pkill",
        "ps",
        "which",
        "type",
        "man",
        "sleep",
        "date",
        "whoami",
        "seq",
        "expr",
        "claude",
        "codex",
        "gemini",
        "aider",
        "ssh",
        "open",
        "say",
        "osascript",
    ]
)
_GENERIC = _Spec(NAME, strict=False)
# git: options before the subcommand that take a value, and what subcommands do to paths.
_GIT_GLOBAL = _v("-C", "-c", "--git-dir", "--work-tree", "--namespace")
_GIT_VALUES = _v("-m", "-F", "-C", "-c", "-n", "-s", "-b", "-B", "-S", "-G", "-U", "-e")
_GIT_VALUES |= _v("--author", "--grep", "--since", "--until", "--after", "--before", "--date")
_GIT_VALUES |= _v("--message", "--file", "--source", "--format", "--pretty", "--orphan")
_GIT_SUBCOMMANDS: dict[str, tuple[str, bool]] = {
    # subcommand: (access of its path operands, whether every operand is a path)
    "add": (NAME, True),
    "rm": (WRITE, True),
    "mv": (WRITE, True),
    "restore": (WRITE, True),
    "checkout": (WRITE, False),  # `git checkout a.py` restores a file; `x/y` is a branch
    "apply": (READ, True),
    **dict.fromkeys(
        ["diff", "log", "show", "blame", "annotate", "status", "ls-files", "commit", "stash"],
        (NAME, False),
    ),
}

_FILE_SUFFIX = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,7}$")
# Patterns, variables, URLs, assignments, quotes and text: nothing a file is called.
_NOT_A_PATH = re.compile(r"[*?\[\]{}$`=|<>;()'\"\t\n\r\f\v\\]|://|^-|^@")
# A space (`Sample\ File.vtt`, `"My File.txt"`) is in a path only when the word starts as one.
_SPACED_PATH = ("/", "./", "../", "~/")
# git revisions and ranges: main..HEAD, a...b, HEAD~1, HEAD^, @{u}
_REVISION = re.compile(r"[^/.]\.\.(?!/)|\.\.\.|[\w)]~\d|\^|@\{")
_NODE_ID = re.compile(r"::.*$")  # pytest node ids: tests/test_x.py::TestA::test_b
_LINE_SUFFIX = re.compile(r":\d+(?::\d+)?$")  # src/a.py:12:3
_HOME_IN_PATH = re.compile(r"^(/(?:Users|home)/[^/]+|/root)(?:/|$)")
_TRANSCRIPT_DIRS = ("/.claude/", "/.config/claude/", "/.codex/", "/.gemini/")


def guess_home(*paths: str | None) -> str | None:
    """The home directory of whoever wrote a transcript: the part before ``/.claude/`` (or
    ``.codex``, ``.gemini``) of the transcript's path, else ``/Users/<name>``,
    ``/home/<name>`` or ``/root`` at the start of one of the paths (a working directory)."""
    for p in paths:
        for marker in _TRANSCRIPT_DIRS:
            if p and marker in p:
                return p[: p.index(marker)] or None
    for p in paths:
        m = _HOME_IN_PATH.match(p or "")
        if m:
            return m.group(1)
    return None


def files_in_command(
    command: str,
    cwd: str | None,
    projects: ProjectsLike | None = None,
    home: str | None = None,
) -> list[FileUse]:
    """The files a shell command line reads, writes or names, each once, resolved where the
    command ran (after `cd x &&`, `git -C x`, `( cd y; … )`).

    Redirections (`> f`, `>> f`, `< f`), `tee`, `sed -i`, `cp`/`mv`/`rm`/`touch`/`mkdir` and
    the like write; `cat`, `head`, `grep PATTERN f`, `sed -n p f`, `ls d` read; other programs
    only name the files in their arguments (`pytest tests/x.py::test_a` names tests/x.py).
    Option values, patterns, scripts, branch names, package names and text are not files.
    For programs not known here a word counts only when it looks like a path (it starts with
    ``/``, ``./``, ``../`` or ``~/``, ends with ``/`` or has a file suffix). ``~`` is expanded
    with ``home``; without one such paths are dropped. When a program uses a file several
    ways, writing wins over reading over naming.
    """
    found: dict[str, FileUse] = {}
    for access, word, where in _shell_uses(_lex(command), cwd, home):
        path = _as_path(word, home)
        if not path or not (_is_absolute(path) or (where and _is_absolute(where))):
            continue  # relative to a directory nobody knows
        entity = canonical_file(path, where, projects)
        if entity is None:
            continue
        known = found.get(entity.key)
        if known is None or _STRENGTH[access] > _STRENGTH[known.access]:
            found[entity.key] = FileUse(access, known.entity if known else entity)
    return list(found.values())


def _as_path(word: str, home: str | None) -> str | None:
    """The path a word names, or None (``-``, ``/dev/null``, ``~`` with no home known)."""
    word = _LINE_SUFFIX.sub("", _NODE_ID.sub("", word))
    if not word or word == "-" or ":" in word or _NOT_A_PATH.search(word) or _REVISION.search(word):
        return None
    if " " in word and not word.startswith(_SPACED_PATH):
        return None
    if word.startswith(("/dev/", "/proc/")) or word == "/dev":
        return None
    return expand_home(word, home)


def _is_absolute(path: str) -> bool:
    return path.startswith("/") or bool(_WINDOWS_ABS.match(path))


def _looks_like_path(word: str) -> bool:
    if word.startswith(("/", "./", "../", "~/")) or word.endswith("/"):
        return True
    return bool(_FILE_SUFFIX.search(_LINE_SUFFIX.sub("", _NODE_ID.sub("", word))))


_Use = tuple[str, str, str | None]  # (access, word, the directory it is relative to)


def _shell_uses(tokens: list[str], cwd: str | None, home: str | None) -> list[_Use]:
    """Walk a tokenised command line: simple commands, their redirections, and the working
    directory as `cd` and subshells change it."""
    uses: list[_Use] = []
    stack: list[str | None] = []
    simple: list[str] = []
    piped = False

    def flush(next_piped: bool) -> None:
        nonlocal cwd, simple, piped
        if simple:
            cwd = _simple_uses(simple, cwd, home, piped, uses)
        simple, piped = [], next_piped

    for i, tok in enumerate(tokens):
        if tok == "$" and i + 1 < len(tokens) and tokens[i + 1].startswith("("):
            continue  # `$(` opens a command substitution, handled like a subshell
        if not _is_separator(tok):
            simple.append(tok)
            continue
        flush(tok.strip("()") in ("|", "|&"))
        for c in tok:  # a subshell's `cd` ends with it
            if c == "(":
                stack.append(cwd)
            elif c == ")" and stack:
                cwd = stack.pop()
    flush(False)
    return uses


_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})


def _simple_uses(
    words: list[str], cwd: str | None, home: str | None, piped: bool, uses: list[_Use]
) -> str | None:
    """Add one simple command's file uses; return the working directory after it."""
    argv: list[str] = []
    target: str | None = None  # what the pending redirection does
    for w in words:
        if target is not None:
            if target and not (target == "dup" and (w.isdigit() or w == "-")):
                uses.append((READ if target == "read" else WRITE, w, cwd))
            target = None
        elif w in _REDIRECTS:
            if argv and argv[-1].isdigit():
                argv.pop()  # the fd number in `2>/dev/null`
            target = {"<": "read", "<<": "", "<<<": "", ">&": "dup", "<&": "dup"}.get(w, "write")
        else:
            argv.append(w)
    while argv and argv[0] in _KEYWORDS:
        argv = argv[1:]
    if not argv or argv[0] in _SKIP_WHOLE:
        return cwd
    i = _unwrap(argv)
    if i >= len(argv):
        return cwd
    prog, args = _basename(argv[i]), [a for a in argv[i + 1 :] if a != ""]
    if prog in ("cd", "pushd"):
        dest = next((a for a in args if not a.startswith("-")), "~")
        if dest == "-":
            return cwd  # back to a directory this line does not show: keep the last known
        path = _as_path(dest, home)
        return normalize_path(path, cwd) if path else None  # None: somewhere unknown
    if prog in _SHELLS:
        script = _shell_script(args)
        if script is not None:
            uses.extend(_shell_uses(_lex(script), cwd, home))
            return cwd
    if prog == "git":
        _git_uses(args, cwd, home, uses)
    elif prog == "find":
        uses.extend((READ, a, cwd) for a in _find_roots(args))
    elif prog == "dd":
        for a in args:
            if a.startswith(("if=", "of=")):
                uses.append((READ if a[0] == "i" else WRITE, a[3:], cwd))
    elif prog in _SPECS:
        _operand_uses(args, _SPECS[prog], cwd, piped, uses)
    elif prog in _NO_PATHS:
        if "--" in args:
            _operand_uses(args[args.index("--") + 1 :], _GENERIC, cwd, piped, uses)
    elif prog not in _NOT_PROGRAMS:
        _operand_uses(args, _GENERIC, cwd, piped, uses)
    return cwd


def _operand_uses(
    args: list[str], spec: _Spec, cwd: str | None, piped: bool, uses: list[_Use]
) -> None:
    """Operands and option values of one program, after the options are told apart. A word
    after `--` is an operand whatever it looks like."""
    operands: list[tuple[str, bool]] = []  # (word, came after `--`)
    given: set[str] = set()
    access = spec.access
    i, options_end = 0, False
    while i < len(args):
        a = args[i]
        if options_end or not a.startswith("-") or a == "-":
            operands.append((a, options_end))
        elif a == "--":
            options_end = True
        else:
            name = a.split("=", 1)[0]
            given.add(name)
            if spec.in_place and name.startswith(("-i", "--in-place")):
                access = WRITE
            n = spec.values.get(name, 0) if "=" not in a else 0
            for value in args[i + 1 : i + 1 + n]:
                if name in spec.writes or name in spec.reads:
                    uses.append((WRITE if name in spec.writes else READ, value, cwd))
            i += n
        i += 1
    if not given & spec.pattern_options:
        operands = operands[spec.patterns :]
    if not operands and spec.bare and not piped:
        operands = [(".", True)]
    for k, (word, after_dashes) in enumerate(operands):
        kind = spec.last if spec.last and k == len(operands) - 1 and k > 0 else access
        if spec.strict or after_dashes or _looks_like_path(word):
            if kind == NAME and word in (".", ".."):
                continue  # `git add .` names the whole tree, not a file
            uses.append((kind, word, cwd))


def _git_uses(args: list[str], cwd: str | None, home: str | None, uses: list[_Use]) -> None:
    """`git [-C dir] sub …`: paths of the subcommands that take them; refs are not files."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] == "-C" and i + 1 < len(args):
            where = _as_path(args[i + 1], home)
            cwd = normalize_path(where, cwd) if where else None
        i += 1 + _GIT_GLOBAL.get(args[i], 0)
    if i >= len(args):
        return
    sub, rest = args[i], args[i + 1 :]
    if sub not in _GIT_SUBCOMMANDS:  # merge, push, branch…: only what follows `--` is a path
        rest = rest[rest.index("--") :] if "--" in rest else []
    access, strict = _GIT_SUBCOMMANDS.get(sub, (NAME, True))
    _operand_uses(rest, _Spec(access, _GIT_VALUES, strict=strict), cwd, False, uses)


def _find_roots(args: list[str]) -> list[str]:
    """The directories `find` starts from: its operands before the expression."""
    roots: list[str] = []
    for a in args:
        if a.startswith(("-", "(", "!")) or a == "\\(":
            break
        roots.append(a)
    return roots or ["."]


def _lex(command: str) -> list[str]:
    """Shell words and operators of a command line; none when it does not parse (an unclosed
    quote): guessing would make files of fragments."""
    try:
        return _tokenize(_unglue_substitutions(_strip_heredocs(command)))
    except ValueError:
        return []


# `$(…)` (`PATH=$PATH:$(pwd)/x`, `echo $(date) x`): the tokenizer would cut the word at the
# parentheses and take what follows (`/x`, `x`) for a program.
_SUBSTITUTION = re.compile(r"\$\(([^()]*)\)")


def _unglue_substitutions(s: str) -> str:
    """Replace each `$(…)` by a variable and run its command in a subshell after the line
    (its programs still run; the word it was in stays one word)."""
    inner = _SUBSTITUTION.findall(s)
    if not inner:
        return s
    return _SUBSTITUTION.sub("$_", s) + "".join(f"\n( {c} )" for c in inner)


def _tokenize(s: str) -> list[str]:
    lex = shlex.shlex(s, posix=True, punctuation_chars="();<>|&\n")
    lex.whitespace = " \t\r"
    lex.whitespace_split = True
    lex.commenters = "#"
    return list(lex)


def _is_separator(tok: str) -> bool:
    return tok not in _REDIRECTS and bool(tok) and all(c in _PUNCT for c in tok)


def _programs_of_tokens(tokens: list[str]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    simple: list[str] = []
    for i, tok in enumerate(tokens):
        if tok == "$" and i + 1 < len(tokens) and tokens[i + 1].startswith("("):
            continue  # `$(` opens a command substitution, handled like a subshell
        if _is_separator(tok):
            out.extend(_programs_of_simple(simple))
            simple = []
        else:
            simple.append(tok)
    out.extend(_programs_of_simple(simple))
    return out


def _programs_of_simple(words: list[str]) -> list[tuple[str, str]]:
    """The program of one simple command (words between separators), after its prefixes."""
    words = _drop_redirections(words)
    segment = shlex.join(words)
    while words and words[0] in _KEYWORDS:
        words = words[1:]
    if not words or words[0] in _SKIP_WHOLE:
        return []
    return [(prog, segment) for prog, _ in _programs_of_argv(words)]


def _drop_redirections(words: list[str]) -> list[str]:
    out: list[str] = []
    skip_next = False
    for w in words:
        if skip_next:
            skip_next = False
        elif w in _REDIRECTS:
            skip_next = True
            if out and out[-1].isdigit():
                out.pop()  # the fd number in `2>&1`
        else:
            out.append(w)
    return out


def _programs_of_argv(argv: list[str]) -> list[tuple[str, str]]:
    """Unwrap assignments, wrappers, shells and runners from an argv; return its program."""
    i = _unwrap(argv)
    if i >= len(argv):
        return []
    prog = _VERSION_TAG.sub("", _basename(argv[i]))
    if prog in _NOT_PROGRAMS:
        return []
    if prog in _SHELLS:
        script = _shell_script(argv[i + 1 :])
        if script is not None:
            return command_programs(script)
    return [(prog, shlex.join(argv[i:]))] if prog else []


# `npx create-next-app@latest`, `uvx ruff@0.6.1`: the package's version is not the program.
_VERSION_TAG = re.compile(r"(?<=[^@/])@[^@/]*$")


def _unwrap(argv: list[str]) -> int:
    """Index of the word naming the program an argv runs, after assignments, keywords,
    wrappers (`sudo`, `timeout 5`) and runners (`uv run`); ``len(argv)`` if there is none."""
    i = 0
    while i < len(argv):
        word = argv[i]
        if _ASSIGNMENT.match(word) or word in _KEYWORDS:
            i += 1
            continue
        prog = _basename(word)
        if prog in _WRAPPERS:
            i = _skip_options(argv, i + 1, _WRAPPERS[prog])
            continue
        if prog in _POSITIONAL_WRAPPERS:
            opts, positional = _POSITIONAL_WRAPPERS[prog]
            i = _skip_options(argv, i + 1, opts) + positional
            continue
        if prog in _RUNNERS:
            j = _runner_target(argv, i, *_RUNNERS[prog])
            if j is not None:
                i = j
                continue
        return i
    return len(argv)


def _skip_options(argv: list[str], i: int, with_value: frozenset[str]) -> int:
    while i < len(argv):
        w = argv[i]
        if w == "--":
            return i + 1
        if _ASSIGNMENT.match(w):  # `env FOO=1 cmd`
            i += 1
        elif w.startswith("-") and len(w) > 1:
            i += 2 if w in with_value else 1
        else:
            return i
    return i


def _shell_script(args: list[str]) -> str | None:
    """The script of `bash -c 'script'` / `zsh -lc 'script'`, if that is the form used."""
    for j, a in enumerate(args):
        if a.startswith("-") and not a.startswith("--") and "c" in a[1:]:
            return args[j + 1] if j + 1 < len(args) else None
        if not a.startswith("-"):
            return None
    return None


def _runner_target(
    argv: list[str], i: int, subcommands: tuple[str, ...], with_value: frozenset[str]
) -> int | None:
    """Index of the program a runner runs (`uv run X`, `npx X`), or None if it runs none."""
    j = _skip_options(argv, i + 1, with_value)
    if subcommands:
        for sub in subcommands:
            parts = sub.split()
            if argv[j : j + len(parts)] == parts:
                j = _skip_options(argv, j + len(parts), with_value)
                break
        else:
            return None
    return j if j < len(argv) else None


def _basename(word: str) -> str:
    return posixpath.basename(word.rstrip("/")) if "/" in word else word


def _fallback(command: str) -> list[tuple[str, str]]:
    """For input shlex cannot parse (an unclosed quote): the first plausible word."""
    first_line = command.strip().splitlines()[0] if command.strip() else ""
    words = [w for w in re.split(r"[\s;|&()]+", first_line) if w]
    return _programs_of_argv([w.strip("'\"") for w in words])[:1]


def _dedupe(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    for prog, seg in pairs:
        if prog and prog not in seen:
            seen.add(prog)
            out.append((prog, seg))
    return out


# --------------------------------------------------------------------------------------------
# Tools


def canonical_tool(name: str) -> Entity:
    """Tool names are case-folded; ``mcp__server__tool`` becomes ``mcp:server:tool``."""
    key = name.strip().lower()
    if key.startswith("mcp__"):
        key = ":".join(part for part in key.split("__") if part)
    return Entity(TOOL, key, name, key)


# --------------------------------------------------------------------------------------------
# URLs

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}
_TRACKING = re.compile(r"^(utm_\w+|fbclid|gclid|mc_cid|mc_eid|ref_src)$", re.I)
_BARE_HOST = re.compile(r"^[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+(:\d+)?(/|$)")


def canonical_url(url: str | None) -> Entity | None:
    """Normalise a URL: lower-case scheme and host, no credentials, no default port, no
    fragment, dot segments removed, tracking parameters dropped, other parameters sorted."""
    if not url or not url.strip():
        return None
    raw = url.strip()
    text = raw if "://" in raw else ("https://" + raw if _BARE_HOST.match(raw) else "")
    if not text:
        return None
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower().rstrip(".")
    if not host:
        return None
    netloc = host if port in (None, _DEFAULT_PORTS.get(scheme)) else f"{host}:{port}"
    path = posixpath.normpath(parts.path) if parts.path not in ("", "/") else "/"
    if parts.path.endswith("/") and path != "/":
        path += "/"
    query = urlencode(
        sorted(
            (k, v)
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
            if not _TRACKING.match(k)
        )
    )
    key = urlunsplit((scheme, netloc, path, query, ""))
    return Entity(URL, key, raw, host)


# --------------------------------------------------------------------------------------------
# Errors

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_TAGS = re.compile(r"</?tool_use_error>")
_EXIT_LINE = re.compile(r"^\s*Exit code (-?\d+)\s*$", re.M)
_EXCEPTION = re.compile(
    r"^(?:E\s+|Uncaught\s+)?([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Fault|Failure|"
    r"NotFound|Denied|Timeout))(?::\s*(.*))?$"
)
# A compiler's coded diagnostic anywhere in a line: `src/a.ts(3,1): error TS2307: …`,
# `error[E0425]: …`. The code is the failure's identity.
_CODED = re.compile(r"\berror\s*\[?([A-Z]{1,5}\d{2,5})\]?:\s*(.*)$", re.I)
# Lines that warn rather than fail (npm's config warnings, deprecations): never the failure.
_WARNING = re.compile(
    r"^(?:npm\s+warn\b|warn(?:ing)?\b|\(node:\d+\)\s.*Warning\b|\S*:\d+:\s*\w*Warning:|"
    r"\w*Warning:)",
    re.I,
)
_HTTP_REASONS = (
    "Bad Request|Unauthorized|Payment Required|Forbidden|Not Found|Method Not Allowed|"
    "Not Acceptable|Request Timeout|Conflict|Gone|Too Many Requests|Internal Server Error|"
    "Not Implemented|Bad Gateway|Service Unavailable|Gateway Timeout|Unprocessable Entity|"
    "Unprocessable Content"
)
# An HTTP status in words: kept through masking, it tells a 403 from a 404.
_HTTP_STATUS = re.compile(
    r"(?i:\b(?:HTTP(?:/[\d.]+)?|status(?:\s+code)?|response\s+code|returned\s+error)"
    rf"[\s:=]*)[1-5]\d\d\b|\b[1-5]\d\d\s+(?:{_HTTP_REASONS})\b"
)
_PREFIXED = re.compile(
    r"^(fatal|error|ERROR|Error|FAILED|FAIL|panic|npm ERR!|Traceback|TypeError|SyntaxError)"
    r"(?:\[[^\]]*\])?[:!]?\s*(.*)$"
)
_NOT_FOUND = re.compile(r"command not found|No such file or directory|not found", re.I)
# pytest's closing line: "==== 2 failed, 3 passed in 0.5s ====", "=== 205 deselected in 0.58s ==="
_PYTEST_SUMMARY = re.compile(
    r"^=+ (.*\b(?:failed|errors?|passed|deselected|skipped|no tests ran)\b.*?) =+$"
)
# A summary with none of these ran no test (pytest's exit 5), however it words that: "205
# deselected", "no tests collected (205 deselected)", "no tests ran" are one failure.
_PYTEST_RAN = re.compile(r"\b(?:x?failed|errors?|x?passed)\b")

_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b[A-Za-z][\w+.-]*://[^\s'\"<>)\]]+"), "<url>"),
    (
        re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
        "<uuid>",
    ),
    # A pytest node id keeps its file's name (test_basic in test_a.py is not test_basic in
    # test_b.py) but not the directory: pytest shows it relative to where it ran.
    (re.compile(r"(?:[A-Za-z]:\\|~?/|\.{1,2}/)?(?:[\w.@+-]+[/\\])+(?=[\w.@+-]+\.py::)"), ""),
    (re.compile(r"(?:[A-Za-z]:\\|~?/|\.{1,2}/)?(?:[\w.@+-]+[/\\])+[\w.@+-]*"), "<path>"),
    (re.compile(r"(?:[A-Za-z]:\\|~)?/[\w.@+-][\w.@+/-]*"), "<path>"),  # not a lone `/`
    (re.compile(r"\b[A-Za-z]+_[A-Za-z0-9]{10,}\b"), "<id>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<hex>"),
    (re.compile(r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{7,}\b"), "<hex>"),
    (re.compile(r"\b(?=[A-Za-z0-9]*\d)(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{16,}\b"), "<id>"),
    # counts, times, line numbers; not the digits of a code (TS2307, E501)
    (re.compile(r"(?<!\w)\d+(?:\.\d+)*"), "<n>"),
)


@dataclass(frozen=True, slots=True)
class ErrorSignature:
    """What kind of failure a text describes: ``type`` and the masked ``message`` (its
    identity); ``line``: the line they were read from, as it appeared (for display)."""

    type: str
    message: str
    exit_code: int | None = None
    line: str = ""

    @property
    def key(self) -> str:
        return blake3(f"{self.type}\n{self.message}".encode()).hexdigest()[:32]


def error_signature(text: str, exit_code: int | None = None) -> ErrorSignature:
    """Classify error output: the last exception line of a traceback, else the first line that
    says ``fatal:``/``error:``/``… not found``, else the first line; then mask the variable parts
    (numbers, paths, hex, uuids and ids) so the same failure seen twice has the same key."""
    clean = _TAGS.sub("", _ANSI.sub("", text or "")).strip()
    if clean.startswith("Error: "):
        clean = clean[len("Error: ") :]
    m = _EXIT_LINE.search(clean)
    if m:
        exit_code = int(m.group(1)) if exit_code is None else exit_code
        clean = (clean[: m.start()] + clean[m.end() :]).strip()
    lines = [ln.strip() for ln in clean.splitlines() if ln.strip()]
    etype, message, line = _classify(lines, exit_code)
    if etype == "error" and _TAGS.search(text or ""):
        etype = "tool_use_error"  # Claude Code's own validation of a tool call
    return ErrorSignature(etype, mask(message)[:200], exit_code, line[:500])


def _classify(lines: list[str], exit_code: int | None) -> tuple[str, str, str]:
    """(type, message, the line both come from)."""
    lines = [ln for ln in lines if not _WARNING.match(ln)] or lines
    for ln in lines:
        m = _CODED.search(ln)
        if m:
            return m.group(1), m.group(2), ln
    for ln in reversed(lines):
        m = _EXCEPTION.match(ln)
        if m:
            return m.group(1).rsplit(".", 1)[-1], m.group(2) or "", ln
    for ln in lines:
        m = _PREFIXED.match(ln)
        if m and m.group(1) != "Traceback":
            return m.group(1).lower().rstrip("!"), m.group(2), ln
    for ln in reversed(lines):
        m = _PYTEST_SUMMARY.match(ln)
        if m:
            ran = _PYTEST_RAN.search(m.group(1))
            return "pytest", m.group(1) if ran else "no tests ran", ln
    for ln in lines:
        if _HTTP_STATUS.search(ln):
            return "http", ln, ln
    for ln in lines:
        if _NOT_FOUND.search(ln):
            return "not found", ln, ln
    fallback = "exit" if exit_code not in (None, 0) else "error"
    return fallback, lines[0] if lines else "", lines[0] if lines else ""


def mask(message: str) -> str:
    """Replace the parts of an error message that vary between occurrences (HTTP statuses
    stay: they are what the failure was)."""
    text, parts, pos = message[:500], [], 0
    for m in _HTTP_STATUS.finditer(text):
        parts += [_mask_part(text[pos : m.start()]), m.group()]
        pos = m.end()
    parts.append(_mask_part(text[pos:]))
    return re.sub(r"\s+", " ", "".join(parts)).strip()


def _mask_part(text: str) -> str:
    for pattern, token in _MASKS:
        text = pattern.sub(token, text)
    return text


def canonical_error(text: str, exit_code: int | None = None) -> Entity:
    """The error entity for a failure (key = blake3 of type + masked message). ``raw`` is the
    line the signature was read from, as it appeared (an alias: one per distinct wording)."""
    sig = error_signature(text, exit_code)
    name = f"{sig.type}: {sig.message}" if sig.message else sig.type
    return Entity(ERROR, sig.key, sig.line or sig.type, name[:200])
