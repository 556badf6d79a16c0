"""The agent-facing commands: `memoryd mcp`, `memoryd hook`, `memoryd integrate`.

Agents start these for every session and every prompt, so they load only the light client
(no model, no database SDK): memoryd/entry.py runs them without importing memoryd/cli/app.py.
memoryd/cli/app.py adds the same commands to the full `memoryd` command for its help.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from memoryd.errors import MemorydError

# Settings, asyncio and difflib are imported where a command uses them: `memoryd --help`
# (this app's commands are part of memoryd/cli/app.py's) needs none of them.
if TYPE_CHECKING:
    from memoryd.config import Settings

DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Data dir (default: $MEMORYD_DATA_DIR or XDG data home)."),
]
# Plain help, as memoryd/cli/app.py says why.
app = typer.Typer(name="memoryd", no_args_is_help=True, add_completion=False, rich_markup_mode=None)
hook_app = typer.Typer(
    help="Context hooks for agents (registered by `memoryd integrate`).", no_args_is_help=True
)
app.add_typer(hook_app, name="hook")


def _settings(data_dir: Path | None) -> Settings:
    from memoryd.config import load_settings

    try:
        return load_settings(data_dir=data_dir)
    except MemorydError as exc:
        typer.echo(f"memoryd: {exc}", err=True)
        raise typer.Exit(1) from None


@app.command()
def mcp(
    http: Annotated[
        bool, typer.Option("--http", help="Serve streamable HTTP instead of stdio.")
    ] = False,
    host: Annotated[str, typer.Option(help="Address for --http (loopback by default).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="Port for --http.")] = 8765,
    allow_host: Annotated[
        list[str] | None,
        typer.Option("--allow-host", help="Another Host name clients use for --http (repeatable)."),
    ] = None,
    in_process: Annotated[
        bool,
        typer.Option(
            "--in-process",
            help="Serve stdio from this process (slow to start: it imports the MCP SDK) instead "
            "of the daemon's session; what plain `memoryd mcp` starts with an external Redis.",
        ),
    ] = False,
    data_dir: DataDir = None,
) -> None:
    """MCP server for agents (stdio; --http: streamable HTTP with a bearer token from
    <data dir>/mcp-token). Needs a running daemon (`memoryd service install` or `memoryd run`).
    Over stdio it lists the tools at once and passes calls to an MCP session in the daemon."""
    import asyncio

    if not (http or in_process):  # spellings memoryd/entry.py leaves here (--data-dir=DIR)
        from memoryd.agent import mcp_shim

        mcp_shim.run(str(data_dir) if data_dir else None)
        return
    from memoryd.agent import mcp_server

    settings = _settings(data_dir)
    try:
        if http:
            typer.echo(
                f"memoryd MCP on http://{host}:{port}/mcp; bearer token in "
                f"{mcp_server.token_path(settings)}",
                err=True,
            )
            asyncio.run(mcp_server.serve_http(settings, host, port, allow_host or []))
        else:
            mcp_server.serve_stdio(settings)
    except MemorydError as exc:
        typer.echo(f"memoryd: {exc}", err=True)
        raise typer.Exit(1) from None


def _hook(agent: str, event: str, data_dir: Path | None) -> None:
    from memoryd.agent import hook_client
    from memoryd.hook_events import EVENTS

    known = [word for (who, word) in EVENTS if who == agent]
    if event not in known:
        typer.echo(f"memoryd: event is one of {', '.join(known)}", err=True)
        raise typer.Exit(2)
    hook_client.run(agent, event, data_dir)


@hook_app.command("claude-code")
def hook_claude_code(
    event: Annotated[
        str,
        typer.Argument(
            help="session-start, user-prompt-submit, pre-tool-use, post-tool-use-failure, stop "
            "or session-end"
        ),
    ],
    data_dir: DataDir = None,
) -> None:
    """Claude Code's SessionStart, UserPromptSubmit, PreToolUse, PostToolUseFailure, Stop and
    SessionEnd hooks."""
    _hook("claude-code", event, data_dir)


@hook_app.command("codex")
def hook_codex(
    event: Annotated[
        str,
        typer.Argument(help="session-start, pre-tool-use, post-tool-use, stop or session-end"),
    ],
    data_dir: DataDir = None,
) -> None:
    """Codex's SessionStart, PreToolUse, PostToolUse, Stop and SessionEnd hooks."""
    _hook("codex", event, data_dir)


@hook_app.command("gemini")
def hook_gemini(
    event: Annotated[str, typer.Argument(help="after-tool, after-agent or session-end")],
    data_dir: DataDir = None,
) -> None:
    """Gemini CLI's AfterTool hook (before an edit is not possible there: docs/clients.md), and
    its AfterAgent / SessionEnd hooks (they queue the transcript's read)."""
    _hook("gemini", event, data_dir)


@app.command()
def integrate(
    client: Annotated[str, typer.Argument(help="claude-code, codex or gemini")],
    uninstall: Annotated[
        bool, typer.Option("--uninstall", help="Remove what integrate added.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show the changes, write nothing.")
    ] = False,
    data_dir: DataDir = None,
) -> None:
    """Register memoryd's MCP server and hooks in a client's user configuration."""
    import difflib

    from memoryd.agent import integrate as integration

    settings = _settings(data_dir)
    try:
        plan = integration.plan(client, settings, uninstall)
        if not dry_run:
            integration.apply(plan)
    except (MemorydError, OSError) as exc:
        typer.echo(f"memoryd: {exc}", err=True)
        raise typer.Exit(1) from None
    for change in plan.changes:
        if not change.changed:
            typer.echo(f"{change.path}: unchanged")
            continue
        verb = "would change" if dry_run else "changed"
        typer.echo(f"{change.path}: {verb}")
        if dry_run:
            diff = difflib.unified_diff(
                (change.before or "").splitlines(),
                (change.after or "").splitlines(),
                str(change.path),
                str(change.path),
                lineterm="",
            )
            typer.echo("\n".join(diff))
    for note in plan.notes:
        typer.echo(note)
