"""The files a shell command line reads, writes or only names."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from workers.stages.entities.commands import (
    KEYWORDS,
    NOT_PROGRAMS,
    REDIRECTS,
    SHELLS,
    SKIP_WHOLE,
    basename,
    is_separator,
    lex,
    shell_script,
    unwrap,
)
from workers.stages.entities.model import Entity, ProjectsLike
from workers.stages.entities.paths import WINDOWS_ABS, canonical_file, expand_home, normalize_path

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
    for access, word, where in _shell_uses(lex(command), cwd, home):
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
    return path.startswith("/") or bool(WINDOWS_ABS.match(path))


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
        if not is_separator(tok):
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
        elif w in REDIRECTS:
            if argv and argv[-1].isdigit():
                argv.pop()  # the fd number in `2>/dev/null`
            target = {"<": "read", "<<": "", "<<<": "", ">&": "dup", "<&": "dup"}.get(w, "write")
        else:
            argv.append(w)
    while argv and argv[0] in KEYWORDS:
        argv = argv[1:]
    if not argv or argv[0] in SKIP_WHOLE:
        return cwd
    i = unwrap(argv)
    if i >= len(argv):
        return cwd
    prog, args = basename(argv[i]), [a for a in argv[i + 1 :] if a != ""]
    if prog in ("cd", "pushd"):
        dest = next((a for a in args if not a.startswith("-")), "~")
        if dest == "-":
            return cwd  # back to a directory this line does not show: keep the last known
        path = _as_path(dest, home)
        return normalize_path(path, cwd) if path else None  # None: somewhere unknown
    if prog in SHELLS:
        script = shell_script(args)
        if script is not None:
            uses.extend(_shell_uses(lex(script), cwd, home))
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
    elif prog not in NOT_PROGRAMS:
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
