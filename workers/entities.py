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
from dataclasses import dataclass
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
        p = posixpath.join(cwd, p)
    if not p:
        return p
    norm = posixpath.normpath(p)
    # normpath keeps a leading "//" (POSIX allows it to mean something); transcripts never do.
    return "/" + norm.lstrip("/") if norm.startswith("//") else norm


def canonical_file(
    path: str | None,
    cwd: str | None = None,
    projects: ProjectsLike | None = None,
    *,
    resolve_symlinks: bool = False,
) -> Entity | None:
    """The file entity for ``path`` as seen from ``cwd``.

    Inside a watched project the key is ``"<project_id>:<path relative to the root>"`` (the same
    key the code indexer uses), otherwise the absolute normalised path. ``resolve_symlinks``
    follows symlinks for paths that exist on this machine (off by default: it is I/O).
    """
    if not path or not path.strip():
        return None
    raw = path
    abs_path = normalize_path(path, cwd)
    if resolve_symlinks and abs_path.startswith("/") and os.path.exists(abs_path):
        abs_path = os.path.realpath(abs_path)
    name = posixpath.basename(abs_path.rstrip("/")) or abs_path
    for project in as_projects(projects):
        rel = _relative_to(abs_path, project.root)
        if rel is not None:
            return Entity(FILE, file_key(project.id, rel), raw, name, project.id)
    return Entity(FILE, abs_path, raw, name)


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
        tokens = _tokenize(_strip_heredocs(command))
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


_FILE_SUFFIX = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,7}$")
_NOT_A_PATH = re.compile(r"[*?\[\]{}$`=]|://")


def files_in_command(
    command: str, cwd: str | None, projects: ProjectsLike | None = None
) -> list[Entity]:
    """Files a shell command names as arguments (`ruff check src/a.py`, `git diff -- b.py`),
    resolved against the cwd: so a file's history also shows the commands run against it.
    A word counts when it holds a `/` or ends in a file suffix, and is not a pattern, a URL,
    an assignment or the value of an option (`find -name x.py` names a pattern, not a file)."""
    try:
        words = _tokenize(_strip_heredocs(command))
    except ValueError:
        return []
    found: dict[str, Entity] = {}
    for previous, word in zip(["", *words], words, strict=False):
        option_value = previous.startswith("-") and previous != "--"
        if word.startswith("-") or option_value or _NOT_A_PATH.search(word):
            continue
        if "/" not in word and not _FILE_SUFFIX.search(word):
            continue
        entity = canonical_file(word, cwd, projects)
        if entity is not None:
            found.setdefault(entity.key, entity)
    return list(found.values())


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
    i = 0
    while i < len(argv):
        word = argv[i]
        if _ASSIGNMENT.match(word) or word in _KEYWORDS:
            i += 1
            continue
        prog = _basename(word)
        if prog in _NOT_PROGRAMS:
            return []
        if prog in _WRAPPERS:
            i = _skip_options(argv, i + 1, _WRAPPERS[prog])
            continue
        if prog in _POSITIONAL_WRAPPERS:
            opts, positional = _POSITIONAL_WRAPPERS[prog]
            i = _skip_options(argv, i + 1, opts) + positional
            continue
        if prog in _SHELLS:
            script = _shell_script(argv[i + 1 :])
            if script is not None:
                return command_programs(script)
        if prog in _RUNNERS:
            j = _runner_target(argv, i, *_RUNNERS[prog])
            if j is not None:
                i = j
                continue
        return [(prog, shlex.join(argv[i:]))] if prog else []
    return []


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
    r"^(?:E\s+)?([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Fault|Failure|"
    r"NotFound|Denied|Timeout))(?::\s*(.*))?$"
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

_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
        "<uuid>",
    ),
    (re.compile(r"(?:[A-Za-z]:\\|~?/|\.{1,2}/)?(?:[\w.@+-]+[/\\])+[\w.@+-]*"), "<path>"),
    (re.compile(r"(?:[A-Za-z]:\\|~)?/[\w.@+/-]*"), "<path>"),
    (re.compile(r"\b[A-Za-z]+_[A-Za-z0-9]{10,}\b"), "<id>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<hex>"),
    (re.compile(r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{7,}\b"), "<hex>"),
    (re.compile(r"\b(?=[A-Za-z0-9]*\d)(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{16,}\b"), "<id>"),
    (re.compile(r"\d+(?:\.\d+)*"), "<n>"),
)


@dataclass(frozen=True, slots=True)
class ErrorSignature:
    """What kind of failure a text describes: ``type`` and the masked ``message``."""

    type: str
    message: str
    exit_code: int | None = None

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
    etype, message = _classify(lines, exit_code)
    if etype == "error" and _TAGS.search(text or ""):
        etype = "tool_use_error"  # Claude Code's own validation of a tool call
    return ErrorSignature(etype, mask(message)[:200], exit_code)


def _classify(lines: list[str], exit_code: int | None) -> tuple[str, str]:
    for ln in reversed(lines):
        m = _EXCEPTION.match(ln)
        if m:
            return m.group(1).rsplit(".", 1)[-1], m.group(2) or ""
    for ln in lines:
        m = _PREFIXED.match(ln)
        if m and m.group(1) != "Traceback":
            return m.group(1).lower().rstrip("!"), m.group(2)
    for ln in reversed(lines):
        m = _PYTEST_SUMMARY.match(ln)
        if m:
            return "pytest", m.group(1)
    for ln in lines:
        if _NOT_FOUND.search(ln):
            return "not found", ln
    fallback = "exit" if exit_code not in (None, 0) else "error"
    return fallback, lines[0] if lines else ""


def mask(message: str) -> str:
    """Replace the parts of an error message that vary between occurrences."""
    out = message[:500]
    for pattern, token in _MASKS:
        out = pattern.sub(token, out)
    return re.sub(r"\s+", " ", out).strip()


def canonical_error(text: str, exit_code: int | None = None) -> Entity:
    """The error entity for a failure (key = blake3 of type + masked message)."""
    sig = error_signature(text, exit_code)
    name = f"{sig.type}: {sig.message}" if sig.message else sig.type
    return Entity(ERROR, sig.key, (text or "")[:500], name[:200])
