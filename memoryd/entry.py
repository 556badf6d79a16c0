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
    app()
