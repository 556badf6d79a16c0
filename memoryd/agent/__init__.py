"""What agents start and talk to: the hook process, the hooks' answers, the MCP server and
its shim, integrate."""
