"""Tools: one key per tool an agent called (an MCP tool's name folded to `mcp:server:tool`)."""

from __future__ import annotations

from memoryd.vocabulary import TOOL
from workers.stages.entities.model import Entity


def canonical_tool(name: str) -> Entity:
    """Tool names are case-folded; ``mcp__server__tool`` becomes ``mcp:server:tool``."""
    key = name.strip().lower()
    if key.startswith("mcp__"):
        key = ":".join(part for part in key.split("__") if part)
    return Entity(TOOL, key, name, key)
