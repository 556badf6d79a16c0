"""The `memoryd` console script. The commands agents start for every session and prompt (`mcp`,
`hook`) run from the light app of memoryd/agent_cli.py; everything else loads the full CLI."""

from __future__ import annotations

import sys

LIGHT = frozenset({"mcp", "hook", "integrate"})


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in LIGHT:
        from memoryd.agent_cli import app
    else:
        from memoryd.cli import app
    app()
