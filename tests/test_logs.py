"""Logging: one line per event; JSON when asked or when stderr is not a terminal."""

from __future__ import annotations

import io
import json
import logging
import os
import pty
import subprocess
import sys
from collections.abc import Iterator

import pytest

from memoryd.cli import logs


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_auto_is_human_on_a_terminal_and_json_elsewhere() -> None:
    assert logs.choose_format("auto", Terminal()) == "human"
    assert logs.choose_format("auto", io.StringIO()) == "json"
    assert logs.choose_format("json", Terminal()) == "json"
    assert logs.choose_format("human", io.StringIO()) == "human"
    with pytest.raises(ValueError, match="unknown log format 'xml'"):
        logs.choose_format("xml", io.StringIO())


def test_json_lines_carry_fields_and_keep_an_error_on_one_line() -> None:
    out = io.StringIO()
    assert logs.setup("INFO", "auto", out) == "json"
    log = logging.getLogger("memoryd.test")
    log.info("indexed %d files", 3, extra={"project": "api-1234", "seconds": 1.5})
    log.debug("not shown at INFO")
    try:
        {}["missing"]
    except KeyError:
        log.exception("job failed\nwith a second line", extra={"job": "index_files"})
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines
    first, second = (json.loads(line) for line in lines)
    assert first["message"] == "indexed 3 files"
    assert first["level"] == "info" and first["logger"] == "memoryd.test"
    assert first["project"] == "api-1234" and first["seconds"] == 1.5
    assert first["time"].endswith("Z") and first["pid"] == os.getpid()
    assert second["level"] == "error" and second["job"] == "index_files"
    assert second["message"] == "job failed\nwith a second line"
    assert second["error"] == "KeyError: 'missing'"
    assert "Traceback" in second["traceback"] and "KeyError" in second["traceback"]


def test_a_field_cannot_overwrite_the_envelope() -> None:
    out = io.StringIO()
    logs.setup("INFO", "json", out)
    logging.getLogger("x").warning("hello", extra={"level": "fake", "path": "/a b"})
    doc = json.loads(out.getvalue())
    assert doc["level"] == "warning" and doc["path"] == "/a b"


def test_human_lines_append_fields_and_colour_only_on_a_terminal() -> None:
    plain = io.StringIO()
    assert logs.setup("INFO", "human", plain) == "human"
    logging.getLogger("memoryd.watch").info("queued", extra={"files": 2, "root": "/my repo"})
    line = plain.getvalue().rstrip("\n")
    assert "\n" not in line and "\x1b[" not in line
    assert line.endswith('INFO    memoryd.watch: queued files=2 root="/my repo"')

    tty = Terminal()
    logs.setup("INFO", "auto", tty)
    logging.getLogger("memoryd").warning("careful")
    assert "\x1b[33mWARNING\x1b[0m memoryd: careful" in tty.getvalue()


def test_chatty_libraries_are_quieted() -> None:
    out = io.StringIO()
    logs.setup("INFO", "json", out)
    logging.getLogger("arq.worker").info("→ job started")
    logging.getLogger("arq.worker").warning("job expired")
    messages = [json.loads(line)["message"] for line in out.getvalue().splitlines()]
    assert messages == ["job expired"]


def _child_logs(stderr_is_tty: bool) -> bytes:
    code = (
        "import logging; from memoryd.cli import logs; logs.setup(); "
        "logging.getLogger('memoryd').info('started', extra={'repos': 2})"
    )
    if not stderr_is_tty:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
        return done.stderr
    controller, terminal = pty.openpty()
    try:
        subprocess.run([sys.executable, "-c", code], stderr=terminal, check=True, timeout=60)
        return os.read(controller, 65536)
    finally:
        os.close(controller)
        os.close(terminal)


def test_a_real_process_writes_json_to_a_pipe_and_text_to_a_terminal() -> None:
    piped = _child_logs(stderr_is_tty=False).decode().splitlines()
    assert len(piped) == 1
    assert json.loads(piped[0])["repos"] == 2
    shown = _child_logs(stderr_is_tty=True).decode()
    assert "memoryd: started repos=2" in shown and not shown.lstrip().startswith("{")
