"""Errors: a failure's signature, the same for the same failure however its output varies."""

from __future__ import annotations

import re
from dataclasses import dataclass

from blake3 import blake3

from memoryd.vocabulary import ERROR
from workers.stages.entities.model import Entity

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
