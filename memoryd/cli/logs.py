"""Logging for a service: one line per event, readable on a terminal, JSON lines elsewhere.

`setup()` replaces the root handlers. "auto" picks human-readable lines when the stream is a
terminal and JSON lines otherwise, because a daemon's stderr goes to journald, launchd's log file
or a container runtime, where a line that a program can parse is worth more than colours.

Structured fields ride on the standard `extra=` argument, so call sites stay plain logging:

    log.info("job done", extra={"job": "index_files", "seconds": 1.25})

JSON puts them next to the message; the human form appends them as `key=value`.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

Format = Literal["auto", "human", "json"]
FORMATS: tuple[str, ...] = ("auto", "human", "json")

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = frozenset(
    {*vars(logging.LogRecord("", 0, "", 0, "", None, None)), "message", "asctime", "taskName"}
)
# Loggers that say too much at INFO for a service log: arq logs every job start and finish
# (our jobs log one line each with their own numbers), watchdog every observer detail.
_CHATTY = {"arq": logging.WARNING, "watchdog": logging.WARNING}
_COLOURS = {
    logging.DEBUG: "\x1b[2m",
    logging.INFO: "\x1b[36m",
    logging.WARNING: "\x1b[33m",
    logging.ERROR: "\x1b[31m",
    logging.CRITICAL: "\x1b[1;31m",
}
_RESET = "\x1b[0m"


def choose_format(requested: str, stream: TextIO) -> Literal["human", "json"]:
    """The format to write: the requested one, or for "auto" what suits the stream."""
    if requested not in FORMATS:
        raise ValueError(f"unknown log format {requested!r}; use one of {', '.join(FORMATS)}")
    if requested == "auto":
        isatty = getattr(stream, "isatty", None)
        return "human" if isatty is not None and isatty() else "json"
    return requested  # type: ignore[return-value]


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a call site attached with `extra=`, in the order given."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """One JSON object per line. A traceback is a string field, so an error is still one line."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        for key, value in extra_fields(record).items():
            doc.setdefault(key, value)  # a field never overwrites the envelope
        if record.exc_info and record.exc_info[0] is not None:
            doc["error"] = f"{record.exc_info[0].__name__}: {record.exc_info[1]}"
            doc["traceback"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        if record.stack_info:
            doc["stack"] = record.stack_info
        return json.dumps(doc, ensure_ascii=False, default=str)


class HumanFormatter(logging.Formatter):
    """`12:34:56 INFO  memoryd.daemon.runtime: message key=value`; colours only on a terminal."""

    def __init__(self, colour: bool = False) -> None:
        super().__init__()
        self.colour = colour

    def format(self, record: logging.LogRecord) -> str:
        clock = datetime.fromtimestamp(record.created).strftime("%H:%M:%S")
        level = f"{record.levelname:<7}"
        if self.colour:
            level = f"{_COLOURS.get(record.levelno, '')}{level}{_RESET}"
        fields = " ".join(f"{k}={_short(v)}" for k, v in extra_fields(record).items())
        line = f"{clock} {level} {record.name}: {record.getMessage()}"
        if fields:
            line = f"{line} {fields}"
        if record.exc_info and record.exc_info[0] is not None:
            # A person reading a terminal wants the whole traceback, indented under its event.
            trace = "".join(traceback.format_exception(*record.exc_info)).rstrip()
            line += "\n" + "\n".join(f"    {t}" for t in trace.splitlines())
        return line


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return json.dumps(text) if (not text or any(c.isspace() for c in text)) else text


def setup(level: str | int = "INFO", fmt: str = "auto", stream: TextIO | None = None) -> str:
    """Send every log record to `stream` (stderr) in the chosen format; returns the format used.
    Replaces any handlers installed before, so calling it again reconfigures cleanly."""
    stream = stream if stream is not None else sys.stderr
    chosen = choose_format(fmt, stream)
    handler = logging.StreamHandler(stream)
    if chosen == "json":
        handler.setFormatter(JsonFormatter())
    else:
        isatty = getattr(stream, "isatty", None)
        handler.setFormatter(HumanFormatter(colour=bool(isatty and isatty())))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    for name, quiet in _CHATTY.items():
        logging.getLogger(name).setLevel(quiet)
    return chosen
