"""Splitting transcript bytes into complete lines and decoding each line defensively.

Transcripts are JSONL files that agents append to while we read them. A tailer must:

- consume bytes only up to the last ``b"\\n"`` (the tail may be a half-written record),
- survive corrupt lines (NUL runs from unclean shutdowns, a truncated record glued to the next
  one, invalid UTF-8, lone UTF-16 surrogates) and huge lines (inline base64 screenshots),
- never raise: every line that cannot be used is reported as a :class:`Skipped` reason.

Everything here is pure apart from :func:`read_lines`, which reads from a binary file object the
caller opened (so a multi-GB file or a single huge line is never held in memory).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, BinaryIO

# Lines above this are skipped, not parsed: a JSON record this large is a screenshot or a
# spilled tool output, and parsing it would cost more memory than it is worth.
MAX_LINE_BYTES = 8 * 1024 * 1024

# How much of a dropped line to keep in a skip report (enough to recognise it, no more).
_EXCERPT_CHARS = 80

_DECODER = json.JSONDecoder()
_WS = " \t\r\n"
# A JSON \u escape of a UTF-16 surrogate; only lines containing one need the slow clean-up walk.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
# What a user wraps in <private>…</private> in a prompt is never stored: it is cut out of
# every string of a record as the line is decoded, before any parser sees it. An unclosed
# marker hides the rest of its text. Only lines that mention the word are walked.
_PRIVATE_HINT = re.compile(r"private", re.IGNORECASE)
_PRIVATE_SPAN = re.compile(r"<private>.*?(?:</private>|\Z)", re.IGNORECASE | re.DOTALL)
PRIVATE_MARK = "[PRIVATE]"
DEEP = "JSON nested too deep"
# Keys that mark a salvaged fragment as a real record rather than a nested object of a stub.
_RECORD_KEYS = ("type", "record_type", "uuid", "id", "sessionId", "payload")


@dataclass(frozen=True, slots=True)
class Line:
    """One complete line of a transcript: its bytes without the newline and where it starts."""

    offset: int
    raw: bytes
    # Length of the line when it was too long to keep in memory (``raw`` is then empty).
    oversize: int = 0

    @property
    def end(self) -> int:
        """Offset just past this line's newline: where the next line starts."""
        return self.offset + (self.oversize or len(self.raw)) + 1


@dataclass(frozen=True, slots=True)
class Skipped:
    """A line (or part of one) that was not used, and why. Never an exception."""

    offset: int
    reason: str
    excerpt: str = ""


@dataclass(frozen=True, slots=True)
class Decoded:
    """The JSON objects recovered from one line (usually one) and what had to be dropped."""

    line: Line
    records: tuple[dict[str, Any], ...]
    skipped: tuple[Skipped, ...] = ()


def split_lines(
    buf: bytes, base_offset: int, max_line: int = MAX_LINE_BYTES
) -> tuple[list[Line], int]:
    """Split ``buf`` (read from file offset ``base_offset``) into complete lines.

    Returns the lines and the offset to resume from: just past the last ``b"\\n"``. Bytes after
    it are an unterminated tail and are left for the next read. A line longer than ``max_line``
    is returned with empty ``raw`` and its size in ``oversize`` so the caller still advances.
    """
    lines: list[Line] = []
    start = 0
    while True:
        nl = buf.find(b"\n", start)
        if nl < 0:
            break
        size = nl - start
        if size > max_line:
            lines.append(Line(base_offset + start, b"", oversize=size))
        else:
            lines.append(Line(base_offset + start, buf[start:nl]))
        start = nl + 1
    return lines, base_offset + start


def read_lines(
    f: BinaryIO,
    offset: int,
    max_bytes: int = 16 * 1024 * 1024,
    max_line: int = MAX_LINE_BYTES,
    chunk_size: int = 1024 * 1024,
) -> tuple[list[Line], int]:
    """Read complete lines from an open binary file starting at ``offset``.

    Reads at most about ``max_bytes`` of lines (always at least one complete line if there is
    one), streams past lines longer than ``max_line`` without holding them, and never returns
    bytes after the last newline. Returns the lines and the offset to store.
    """
    f.seek(offset)
    lines: list[Line] = []
    pending = bytearray()
    pending_start = offset
    skipping = 0  # >0 while streaming past an oversize line: bytes of it seen so far
    consumed = 0
    while consumed < max_bytes or not lines:
        chunk = f.read(chunk_size)
        if not chunk:
            break
        pos = 0
        while pos < len(chunk):
            nl = chunk.find(b"\n", pos)
            piece = chunk[pos:] if nl < 0 else chunk[pos:nl]
            if skipping:
                skipping += len(piece)
            else:
                pending += piece
                if len(pending) > max_line:
                    skipping, pending = len(pending), bytearray()
            if nl < 0:
                break
            if skipping:
                lines.append(Line(pending_start, b"", oversize=skipping))
            else:
                lines.append(Line(pending_start, bytes(pending)))
            consumed += lines[-1].end - pending_start
            pending_start = lines[-1].end
            pending, skipping = bytearray(), 0
            pos = nl + 1
    return lines, pending_start


def decode_line(line: Line, max_line: int = MAX_LINE_BYTES) -> Decoded:
    """Decode one line into JSON objects, salvaging what a corrupt line still holds."""
    size = line.oversize or len(line.raw)
    if line.oversize or size > max_line:
        return Decoded(line, (), (Skipped(line.offset, f"line too long ({size} bytes)"),))
    raw = line.raw.replace(b"\x00", b"") if b"\x00" in line.raw else line.raw
    if not raw.strip():
        if raw is line.raw:  # a genuinely blank line is not worth a report
            return Decoded(line, ())
        return Decoded(line, (), (Skipped(line.offset, "only NUL bytes"),))
    text = raw.decode("utf-8", errors="replace").lstrip("\ufeff")  # a BOM from an editor
    try:
        obj = json.loads(text)
        if not isinstance(obj, dict):
            return Decoded(line, (), (_skip(line.offset, "not a JSON object", text),))
        return Decoded(line, (_without_private(_clean_surrogates(obj, text), text),))
    except ValueError:
        return _salvage(line, text)
    except RecursionError:
        # Nesting deeper than Python's stack (decoding or walking it): no agent writes that,
        # and salvaging would retry the depth at every '{"' of the line.
        return Decoded(line, (), (_skip(line.offset, DEEP, text),))


def _salvage(line: Line, text: str) -> Decoded:
    """Recover whole records from a line holding a truncated stub and/or glued records.

    Walks the line from left to right: a fragment that parses as a record and ends at the end of
    the line or right before another ``{"`` is kept; anything else up to the next ``{"`` is
    dropped and reported. Requiring that boundary rejects nested objects inside a stub.
    """
    records: list[dict[str, Any]] = []
    skipped: list[Skipped] = []
    pos, n = 0, len(text)
    dropped = -1  # start of the run of unusable text being skipped, if any

    def flush(end: int) -> None:
        if dropped >= 0 and text[dropped:end].strip():
            reason = "invalid JSON" if not records and end == n else "corrupt fragment dropped"
            skipped.append(_skip(line.offset, reason, text[dropped:end]))

    while pos < n:
        obj, end = _try_decode(text, pos)
        if obj is not None:
            flush(pos)
            dropped = -1
            records.append(_without_private(_clean_surrogates(obj, text[pos:end]), text))
            pos = end
            while pos < n and text[pos] in _WS:
                pos += 1
            continue
        if dropped < 0:
            dropped = pos
        nxt = text.find('{"', pos + 1)
        pos = n if nxt < 0 else nxt
    flush(n)
    return Decoded(line, tuple(records), tuple(skipped))


def _try_decode(text: str, pos: int) -> tuple[dict[str, Any] | None, int]:
    """Decode a record starting at ``pos`` if it is a whole record on a record boundary."""
    try:
        obj, end = _DECODER.raw_decode(text, pos)
    except ValueError:
        return None, pos
    rest = end
    while rest < len(text) and text[rest] in _WS:
        rest += 1
    on_boundary = rest == len(text) or text.startswith('{"', rest)
    if isinstance(obj, dict) and on_boundary and any(k in obj for k in _RECORD_KEYS):
        return obj, end
    return None, pos


def _clean_surrogates(obj: dict[str, Any], text: str) -> dict[str, Any]:
    """Replace lone UTF-16 surrogates (from truncated emoji) so the data can be UTF-8 encoded."""
    if not _SURROGATE_ESCAPE.search(text):
        return obj
    cleaned = _walk(obj)
    return cleaned if isinstance(cleaned, dict) else obj


def _without_private(obj: dict[str, Any], text: str) -> dict[str, Any]:
    if not _PRIVATE_HINT.search(text):
        return obj
    cleaned = _strip_private(obj)
    return cleaned if isinstance(cleaned, dict) else obj


def _strip_private(value: Any) -> Any:
    if isinstance(value, str):
        return _PRIVATE_SPAN.sub(PRIVATE_MARK, value) if "<" in value else value
    if isinstance(value, dict):
        return {k: _strip_private(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip_private(v) for v in value]
    return value


def _walk(value: Any) -> Any:
    if isinstance(value, str):
        return fix_surrogates(value)
    if isinstance(value, dict):
        return {fix_surrogates(k): _walk(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v) for v in value]
    return value


def fix_surrogates(s: str) -> str:
    """Return ``s`` with unpaired surrogates replaced by U+FFFD (valid pairs are kept)."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _skip(offset: int, reason: str, text: str) -> Skipped:
    excerpt = _PRIVATE_SPAN.sub(PRIVATE_MARK, text)[:_EXCERPT_CHARS]
    return Skipped(offset, reason, fix_surrogates(excerpt))
