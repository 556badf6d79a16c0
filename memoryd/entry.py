"""The `memoryd` console script. A hook runs from memoryd/agent/hook_client.py and `memoryd mcp`
from memoryd/agent/mcp_shim.py, on the standard library alone; the other commands agents start (`mcp
--http`, `integrate`) run from the light app of memoryd/agent/cli.py; everything else loads the
full CLI."""

from __future__ import annotations

import sys

LIGHT = frozenset({"mcp", "hook", "integrate"})


def main() -> None:
    from memoryd.agent import hook_client

    if (hook := hook_client.parse(sys.argv[1:])) is not None:
        hook_client.run(*hook)  # the lightest path: agents wait on it at every prompt
        return
    if sys.argv[1:2] == ["mcp"]:
        from memoryd.agent import mcp_shim

        if (mcp := mcp_shim.parse(sys.argv[1:])) is not None:
            mcp_shim.run(*mcp)  # agents give it seconds to list its tools
            return
    if len(sys.argv) > 1 and sys.argv[1] in LIGHT:
        from memoryd.agent.cli import app
    else:
        from memoryd.cli.app import app
    try:
        app()
    except SystemExit as done:
        _end(done.code)


def _end(code: object) -> None:
    """Exit with `code`. A process that opened the embedded database ends without finalizing
    the interpreter: the engine's threads may still be dropping what they held, and one that
    touches the interpreter while it finalizes aborts the process (exit 134 after the command's
    work was done: 5 of 100 runs that opened, wrote and closed it on a loaded machine)."""
    engine = sys.modules.get("memoryd.store.connection")
    if engine is None or not engine.opened:
        raise SystemExit(code)
    import contextlib  # here: the hook's path (above) stays as light as it was
    import logging
    import os

    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)  # what SystemExit does with a message
        code = 1
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader gone, a stream closed
            stream.flush()
    os._exit(code or 0)
