"""Commands: the programs a shell command line runs, read as a shell reads it."""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Sequence

from memoryd.vocabulary import COMMAND
from workers.stages.entities.model import Entity

# Separators between simple commands; redirections are not separators.
REDIRECTS = frozenset({">", ">>", "<", "<<", "<<<", ">&", "<&", "&>", "&>>", ">|", "<>"})
_PUNCT = set("();<>|&\n")
# Words that prefix a command without being the program that runs.
KEYWORDS = frozenset(
    {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "esac", "{", "}", "!"}
)
SKIP_WHOLE = frozenset({"for", "select", "case", "function", "in"})
# Builtins that run no program (stripped like `cd`; `echo` and friends are kept).
NOT_PROGRAMS = frozenset(
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
SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "fish"})
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


def lex(command: str) -> list[str]:
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
    lexer = shlex.shlex(s, posix=True, punctuation_chars="();<>|&\n")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    lexer.commenters = "#"
    return list(lexer)


def is_separator(tok: str) -> bool:
    return tok not in REDIRECTS and bool(tok) and all(c in _PUNCT for c in tok)


def _programs_of_tokens(tokens: list[str]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    simple: list[str] = []
    for i, tok in enumerate(tokens):
        if tok == "$" and i + 1 < len(tokens) and tokens[i + 1].startswith("("):
            continue  # `$(` opens a command substitution, handled like a subshell
        if is_separator(tok):
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
    while words and words[0] in KEYWORDS:
        words = words[1:]
    if not words or words[0] in SKIP_WHOLE:
        return []
    return [(prog, segment) for prog, _ in _programs_of_argv(words)]


def _drop_redirections(words: list[str]) -> list[str]:
    out: list[str] = []
    skip_next = False
    for w in words:
        if skip_next:
            skip_next = False
        elif w in REDIRECTS:
            skip_next = True
            if out and out[-1].isdigit():
                out.pop()  # the fd number in `2>&1`
        else:
            out.append(w)
    return out


def _programs_of_argv(argv: list[str]) -> list[tuple[str, str]]:
    """Unwrap assignments, wrappers, shells and runners from an argv; return its program."""
    i = unwrap(argv)
    if i >= len(argv):
        return []
    prog = _VERSION_TAG.sub("", basename(argv[i]))
    if prog in NOT_PROGRAMS:
        return []
    if prog in SHELLS:
        script = shell_script(argv[i + 1 :])
        if script is not None:
            return command_programs(script)
    return [(prog, shlex.join(argv[i:]))] if prog else []


# `npx create-next-app@latest`, `uvx ruff@0.6.1`: the package's version is not the program.
_VERSION_TAG = re.compile(r"(?<=[^@/])@[^@/]*$")


def unwrap(argv: list[str]) -> int:
    """Index of the word naming the program an argv runs, after assignments, keywords,
    wrappers (`sudo`, `timeout 5`) and runners (`uv run`); ``len(argv)`` if there is none."""
    i = 0
    while i < len(argv):
        word = argv[i]
        if _ASSIGNMENT.match(word) or word in KEYWORDS:
            i += 1
            continue
        prog = basename(word)
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


def shell_script(args: list[str]) -> str | None:
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


def basename(word: str) -> str:
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
