"""The `memoryd` command."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from memoryd import jobs

# Only what every command needs is imported here: `memoryd --help` and the commands that ask
# the daemon must not pay for the model, the database SDK, watchers or rich's progress bars.
# Each command imports the rest where it uses it.
from memoryd.agent import cli as agent_cli
from memoryd.cli import logs
from memoryd.cli.text import one_line, print_status, status_head
from memoryd.errors import MemorydError
from memoryd.vocabulary import SEARCH_KINDS_BY_NAME

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from arq import ArqRedis
    from rich.console import Console

    from memoryd import projects
    from memoryd.client import Client
    from memoryd.config import Settings
    from memoryd.daemon import metrics
    from memoryd.daemon.runtime import Runtime
    from memoryd.results import SearchResult
    from memoryd.watch.repos import RepoWatcher
    from memoryd.watch.transcripts import TranscriptWatcher

app = typer.Typer(
    name="memoryd",
    help="Local memory for coding agents: code and agent transcripts as one searchable graph.",
    no_args_is_help=True,
    add_completion=False,
    # Click's plain help, not rich's panels: typer's rich help imports rich's Markdown and
    # traceback machinery (about 85 ms of CPU, near half of what `--help` may take).
    rich_markup_mode=None,
)
log = logging.getLogger("memoryd")
T = TypeVar("T")

DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Data dir (default: $MEMORYD_DATA_DIR or XDG data home)."),
]
RedisUrl = Annotated[
    str | None, typer.Option("--redis-url", help="External Redis (default: private embedded one).")
]
SurrealUrl = Annotated[
    str | None,
    typer.Option("--surreal-url", help="SurrealDB server ws://… (default: embedded in data dir)."),
]
Repos = Annotated[
    list[Path] | None, typer.Option("--repo", help="Repository to watch (repeatable).")
]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON document.")]
LogFormat = Annotated[
    str | None,
    typer.Option(
        "--log-format",
        help="auto (text on a terminal, JSON lines otherwise), human or json.",
    ),
]


@cache
def _err() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def _setup_logging(level: str = "INFO", fmt: str = "auto") -> None:
    try:
        logs.setup(level, fmt)
    except ValueError as exc:
        _fail(MemorydError(str(exc)))


def _print_version(asked: bool) -> None:
    if asked:
        from memoryd.version import version  # importlib.metadata: only when asked

        typer.echo(f"memoryd {version()}")
        raise typer.Exit()


@app.callback()
def _private_files(
    _version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Local memory for coding agents: code and agent transcripts as one searchable graph."""
    # Everything any command creates (database, AOF, models, logs) is the user's alone: 0600
    # files and 0700 directories, whatever the caller's umask.
    os.umask(0o077)


def _settings(**overrides: Any) -> Settings:
    from memoryd.config import load_settings

    try:
        return load_settings(**overrides)
    except MemorydError as exc:
        _fail(exc)
        raise  # unreachable; keeps type checkers content


def _client(data_dir: Path | None, redis_url: str | None, surreal_url: str | None) -> Settings:
    """Settings for a one-shot command, whose logs stay quiet unless something is wrong."""
    _setup_logging("WARNING")
    return _settings(data_dir=data_dir, redis_url=redis_url, surreal_url=surreal_url)


def _fail(exc: BaseException) -> None:
    _err().print(f"[bold red]memoryd:[/] {exc}", highlight=False, soft_wrap=True)
    raise typer.Exit(1)


def _run(main: Callable[[], Awaitable[T]]) -> T:
    """Run a command; SIGTERM or Ctrl-C before it waits for signals itself (start-up, a
    one-shot command's work) cancels it, so that everything started so far, the private Redis
    first of all, is stopped in order on the way out."""
    import asyncio
    import signal

    stopped_by: list[signal.Signals] = []

    async def cancellable() -> T:
        loop, task = asyncio.get_running_loop(), asyncio.current_task()
        assert task is not None
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, lambda s=sig: (stopped_by.append(s), task.cancel()))
        return await main()

    try:
        return asyncio.run(cancellable())
    except MemorydError as exc:
        _fail(exc)
        raise
    except asyncio.CancelledError:
        if not stopped_by:
            raise
        log.warning("stopped by %s before finishing", stopped_by[0].name)
        raise typer.Exit(128 + stopped_by[0]) from None
    except Exception as exc:
        # Imported only on this path: the command may not have needed Redis at all.
        from memoryd import queue

        if not queue.server_lost(exc):
            raise
        # Redis gone or refusing writes (its disk full) under the command: one line.
        _fail(MemorydError(f"Redis is lost or refuses writes ({queue.redis_reason(exc)})"))
        raise


def _with_client(settings: Settings, work: Callable[[Client], Awaitable[T]]) -> T:
    """Run `work` with a client of the running daemon, or, when none serves the queue, of a
    worker started in this process for the length of the command (only then are the model and
    the database loaded)."""
    from memoryd import client

    async def main() -> T:
        async with client.connect(settings, serve=_serving_here) as memoryd:
            return await work(memoryd)

    return _run(main)


def _serving_here(settings: Settings) -> AbstractAsyncContextManager[ArqRedis | None]:
    # Imported only when no daemon answers: it loads the model and the database SDK (seconds),
    # which a command that a running daemon answers never needs.
    from memoryd.daemon.runtime import serving_here

    return serving_here(settings)


async def _until_signal(*waitables: Awaitable[Any]) -> None:
    """Wait for SIGINT/SIGTERM (or for one of `waitables` to end)."""
    import asyncio

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.ensure_future(w) for w in waitables]
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
    for task in [stopper, *tasks]:
        if task not in done:
            task.cancel()
    for task in done:
        if task is not stopper and task.exception():
            raise task.exception()  # type: ignore[misc]
    log.info("stopping")


async def _start_watchers(
    redis: Any, settings: Settings, watched: list[projects.Project]
) -> list[RepoWatcher | TranscriptWatcher]:
    from memoryd.watch.repos import RepoWatcher
    from memoryd.watch.transcripts import TranscriptWatcher

    repos = RepoWatcher(redis, watched, settings.debounce_seconds, settings.index_batch_files)
    transcripts = TranscriptWatcher(redis, settings.transcript_roots, settings.debounce_seconds)
    await repos.start()
    await transcripts.start()
    return [repos, transcripts]


async def _start_metrics(rt: Runtime) -> metrics.Endpoint | None:
    """The Prometheus endpoint when `metrics_port` is set; lag needs the database (not the
    watcher alone), queue depth only Redis."""
    from memoryd.daemon import metrics

    s = rt.settings
    return await metrics.start(
        s.metrics_port, s.metrics_host, rt.redis, rt.store, s.transcript_roots
    )


def _watched(settings: Settings) -> list[projects.Project]:
    """The configured repos but those the config keeps out (`exclude`, `include`)."""
    from memoryd import projects

    return [
        projects.resolve(p, settings.remembers) for p in settings.repos if settings.remembers(p)
    ]


def _describe(rt: Runtime) -> str:
    s = rt.settings
    redis = (
        f"private redis {s.redis_socket}" if rt.redis_service else f"redis {rt.settings.queue_url}"
    )
    return f"data dir {s.data_dir}; {redis}; database {s.database_url}; model {s.model}"


def _until_stopped(
    settings: Settings,
    *,
    serves: bool,
    watches: bool,
    started: Callable[[str, int], str],
    exclusive: bool = False,
) -> None:
    """The long-running commands' one shape: a runtime that serves jobs, watches repositories
    and transcripts, or both, until SIGINT/SIGTERM (or until its worker ends)."""
    from memoryd.daemon.runtime import Runtime

    watched = _watched(settings) if watches else []

    async def main() -> None:
        async with Runtime(settings) as rt:
            redis = await rt.start_queue(exclusive=exclusive)
            if serves:
                await rt.serve()
            endpoint = await _start_metrics(rt)
            watchers = await _start_watchers(redis, settings, watched) if watches else []
            log.info("%s", started(_describe(rt), len(watched)))
            try:
                await _until_signal(*([rt.wait_serving()] if serves else []))
            finally:
                for watcher in watchers:
                    await watcher.stop()
                if endpoint is not None:
                    await endpoint.close()

    _run(main)


@app.command()
def run(
    repo: Repos = None,
    data_dir: DataDir = None,
    redis_url: RedisUrl = None,
    surreal_url: SurrealUrl = None,
    log_format: LogFormat = None,
) -> None:
    """Run the daemon: private Redis, database, model, watcher and one worker in one process."""
    settings = _settings(
        data_dir=data_dir, redis_url=redis_url, surreal_url=surreal_url, extra_repos=repo
    )
    _setup_logging("INFO", log_format or settings.log_format)
    _until_stopped(
        settings,
        serves=True,
        watches=True,
        exclusive=True,
        started=lambda where, repos: f"memoryd running: {where}; watching {repos} repos",
    )
    log.info("memoryd stopped")


@app.command()
def worker(
    data_dir: DataDir = None,
    redis_url: RedisUrl = None,
    surreal_url: SurrealUrl = None,
    log_format: LogFormat = None,
) -> None:
    """Run one worker (server mode: many of them against one Redis and one SurrealDB server)."""
    settings = _settings(data_dir=data_dir, redis_url=redis_url, surreal_url=surreal_url)
    _setup_logging("INFO", log_format or settings.log_format)
    _until_stopped(
        settings, serves=True, watches=False, started=lambda where, _: f"worker running: {where}"
    )


@app.command()
def watch(
    repo: Repos = None,
    data_dir: DataDir = None,
    redis_url: RedisUrl = None,
    log_format: LogFormat = None,
) -> None:
    """Run the watcher alone: it enqueues jobs for the workers and never touches the database."""
    settings = _settings(data_dir=data_dir, redis_url=redis_url, extra_repos=repo)
    _setup_logging("INFO", log_format or settings.log_format)
    _until_stopped(
        settings,
        serves=False,
        watches=True,
        started=lambda where, repos: f"watching {repos} repos and transcripts; {where}",
    )


@app.command()
def index(
    path: Annotated[Path, typer.Argument(help="A git working tree (or any directory).")],
    data_dir: DataDir = None,
    redis_url: RedisUrl = None,
    surreal_url: SurrealUrl = None,
    as_json: AsJson = False,
    force: Annotated[
        bool, typer.Option("--force", help="Index a directory that is not a git working tree.")
    ] = False,
) -> None:
    """Index a repository once, through the queue: a progress bar, or a line every few seconds
    when not on a terminal."""
    from memoryd import projects
    from memoryd.scan import is_git_tree

    settings = _client(data_dir, redis_url, surreal_url)
    try:
        project = projects.resolve(path, settings.remembers)
    except MemorydError as exc:
        _fail(exc)
        raise
    if not force and not is_git_tree(project.root):
        # `memoryd index /tmp` would take in everything under it, with no .gitignore to trim.
        _fail(
            MemorydError(
                f"{project.root} is not in a git working tree: every file under it would be "
                "indexed; pass --force to index it anyway"
            )
        )

    async def work(memoryd: Client) -> dict[str, Any]:
        redis = await memoryd.work_queue()
        jobs = await projects.sync(redis, project, settings.index_batch_files, fresh=True)
        return await _follow(redis, jobs, settings, project.id, quiet=as_json)

    totals = _with_client(settings, work)
    totals = {"project": project.id, "root": str(project.root), **totals}
    if as_json:
        print(json.dumps(totals))
    else:
        _err().print(
            f"indexed {project.root} as {project.id}: {totals['files']} files "
            f"({totals['indexed']} indexed, {totals['unchanged']} unchanged, "
            f"{totals['skipped']} skipped, {totals['removed']} removed, "
            f"{totals['untracked']} untracked, {totals['failed']} failed), "
            f"{totals['chunks']} chunks, {totals['embedded']} embedded",
            soft_wrap=True,  # one line in a log, however narrow the terminal is thought to be
            highlight=False,
        )


async def _follow(
    redis: Any, jobs: list[tuple[Any, int]], settings: Settings, project_id: str, quiet: bool
) -> dict[str, Any]:
    """Wait for index jobs, sum their reports, and show how far they got: a progress bar on a
    terminal, else (a log, CI, a pipe) a line every `progress_seconds`. Then wait for the
    vectors of their chunks (embedded after them), so `embedded` counts them all."""
    import asyncio
    import time

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from memoryd import queue

    keys = (
        *("files", "indexed", "unchanged", "skipped", "removed", "untracked", "failed"),
        *("chunks", "embedded", "retired"),
    )
    totals: dict[str, Any] = dict.fromkeys(keys, 0)
    totals["skips"], totals["failures"] = {}, {}
    reports: list[dict[str, Any]] = []
    total = sum(n for _, n in jobs)
    started = time.monotonic()

    async def lines() -> None:
        while True:
            await asyncio.sleep(settings.progress_seconds)
            print(
                f"indexing {project_id}: {totals['files']}/{total} files, "
                f"{totals['chunks']} chunks, {time.monotonic() - started:.0f}s",
                file=sys.stderr,
                flush=True,
            )

    terminal = _err().is_terminal
    ticker = None if terminal else asyncio.create_task(lines())
    columns = (TextColumn("indexing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        with Progress(*columns, console=_err(), disable=quiet or not terminal) as bar:
            task = bar.add_task("files", total=total)
            for job, count in jobs:
                report = await queue.wait_for(job, timeout=settings.job_timeout_seconds)
                for key in keys:
                    totals[key] += report[key]
                totals["skips"].update(report["skips"])
                totals["failures"].update(report["failures"])
                reports.append(report)
                bar.advance(task, count)
        for report in reports:
            totals["embedded"] += await queue.embedded_later(
                redis, report, settings.job_timeout_seconds
            )
    finally:
        if ticker is not None:
            ticker.cancel()
    return totals


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="What to look for, in words or code.")],
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=200)] = 10,
    project: Annotated[str | None, typer.Option(help="Project id, name or root.")] = None,
    kind: Annotated[
        str, typer.Option(help=f"What to search: {', '.join(SEARCH_KINDS_BY_NAME)}.")
    ] = "code",
    as_of: Annotated[
        str | None, typer.Option("--as-of", help="Search what was valid then (ISO-8601 time).")
    ] = None,
    path: Annotated[
        str | None,
        typer.Option(
            "--path", help="Only paths matching this glob (src/**/*.py; no '/': any directory)."
        ),
    ] = None,
    language: Annotated[
        str | None, typer.Option("--language", help="Only this language (python, markdown...).")
    ] = None,
    related: Annotated[
        bool,
        typer.Option(
            "--related", help="Under each code hit, files it usually changes with and callers."
        ),
    ] = False,
    data_dir: DataDir = None,
    redis_url: RedisUrl = None,
    surreal_url: SurrealUrl = None,
    as_json: AsJson = False,
) -> None:
    """Hybrid search (vector k-NN + BM25, reciprocal rank fusion): `project  path:start-end  score
    name` lines."""
    from memoryd.agent.present_graph import hit_lines
    from memoryd.results import SearchRequest
    from memoryd.search_related import HitGraph, related_of_hits

    settings = _client(data_dir, redis_url, surreal_url)
    request = SearchRequest(
        query,
        (kind,),
        limit=limit,
        project=project,
        path=path,
        language=language,
        as_of=_timestamp(as_of) if as_of else None,
    )

    async def work(memoryd: Client) -> tuple[list[SearchResult], dict[str, HitGraph]]:
        results = list((await memoryd.search(request)).hits)
        return results, await related_of_hits(memoryd, results) if related else {}

    results, graphs = _with_client(settings, work)
    if as_json:
        rows = [
            r.as_dict() | ({"related": graphs[r.id]} if r.id in graphs else {}) for r in results
        ]
        print(json.dumps({"query": query, "results": rows}, indent=2))
        return
    if not results:
        _err().print("no results")
    for r in results:
        print(r.line())
        for line in hit_lines(graphs[r.id]) if r.id in graphs else []:
            print(line)


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Transcript files or folders.")],
    data_dir: DataDir = None,
    redis_url: RedisUrl = None,
    surreal_url: SurrealUrl = None,
    as_json: AsJson = False,
) -> None:
    """Ingest agent transcripts once (agent detected from content), through the queue."""
    from memoryd.watch.transcripts import transcript_files

    settings = _client(data_dir, redis_url, surreal_url)
    for path in paths:
        if not path.exists():
            _fail(MemorydError(f"{path} does not exist"))
    files = transcript_files(paths)
    if not files:
        _fail(MemorydError("no transcript files (*.jsonl, *.jsonl.zst) found"))

    reports = _with_client(settings, lambda memoryd: memoryd.ingest(files))
    totals = {
        "files": len(reports),
        "lines": sum(r["lines"] for r in reports),
        "memories": sum(r["memories"] for r in reports),
        "skipped_lines": sum(r["skipped"] for r in reports),
        "edges": _sum_counts(r["edges"] for r in reports),
        "reports": reports,
    }
    if as_json:
        print(json.dumps(totals, indent=2))
        return
    for r in reports:
        edges = ", ".join(f"{k} {v}" for k, v in sorted(r["edges"].items())) or "no edges"
        note = f" ({r['note']})" if r["note"] else ""
        print(
            f"{r['path']}: {r['agent'] or '?'}, {r['lines']} lines, {r['memories']} memories, "
            f"{edges}, {r['skipped']} lines skipped{note}"
        )
        for session_id in r["session_ids"]:
            print(f"  session {session_id}")
    print(f"{totals['files']} files: {totals['memories']} memories added or updated")


def _sum_counts(counts: Any) -> dict[str, int]:
    total: dict[str, int] = {}
    for count in counts:
        for key, value in count.items():
            total[key] = total.get(key, 0) + value
    return total


@app.command()
def history(
    path: Annotated[Path, typer.Argument(help="A file, as the agents named it.")],
    data_dir: DataDir = None,
    redis_url: RedisUrl = None,
    surreal_url: SurrealUrl = None,
    as_json: AsJson = False,
) -> None:
    """Every session that read or modified this file, newest first, and its current chunks."""
    settings = _client(data_dir, redis_url, surreal_url)
    doc = _with_client(settings, lambda memoryd: memoryd.history(str(path)))
    if as_json:
        print(json.dumps(doc, indent=2))
        return
    print(f"{doc['file']['key']}: {len(doc['sessions'])} sessions")
    for s in doc["sessions"]:
        verbs = _sum_counts({f"{a['verb']} {a['outcome'] or a['reason']}": 1} for a in s["actions"])
        print(f"\n{s['session']}  {s['agent']}  {s['started_at'] or '?'} .. {s['ended_at'] or '?'}")
        print(f"  goal: {one_line(s['goal'])}")
        print("  did:  " + ", ".join(f"{k} ×{v}" for k, v in verbs.items()))
        # How the file stands against what the session's last read or edit of it saw or left.
        anchored = [a for a in s["actions"] if a.get("anchor")]
        if anchored:
            print(f"  code: {anchored[-1]['anchor']} (after its last {anchored[-1]['verb']})")
        for e in s["errors"]:
            times = f" (×{e['count']})" if e["count"] > 1 else ""
            message = re.sub(r"(?i)^error:\s*", "", e["message"] or e["error"])
            print(f"  error{times}: {one_line(message)}")
    for n in doc["notes"]:
        code = f" (code {n['anchor']})" if n["anchor"] else ""
        print(f"\n{n['kind']} {n['id']}  {n['event_time'] or '?'}{code}\n  {one_line(n['text'])}")
    if doc["chunks"]:
        print("\ncurrent chunks:")
        for c in doc["chunks"]:
            print(
                f"  {c['path']}:{c['start_line']}-{c['end_line']}  {c['chunk_type']}  "
                f"{c['name'] or '-'}"
            )


# A terminal shows the whole answer (an agent's tools cut theirs to max_chars).
_CLI_CHARS = 1_000_000


@app.command()
def related(
    target: Annotated[
        str, typer.Argument(help="A file, PATH#Name, a symbol's name or a chunk id.")
    ],
    as_of: Annotated[
        datetime | None, typer.Option("--as-of", help="The graph as it was then (ISO time).")
    ] = None,
    limit: Annotated[int, typer.Option(help="Entries per list.")] = 50,
    data_dir: DataDir = None,
    redis_url: RedisUrl = None,
    surreal_url: SurrealUrl = None,
    as_json: AsJson = False,
) -> None:
    """The code graph around TARGET: definitions, callers and callees, importers and imports,
    bases, files that change with it, and the sessions that touched each."""
    from memoryd.agent import present_graph

    settings = _client(data_dir, redis_url, surreal_url)
    doc = _with_client(settings, lambda memoryd: memoryd.related(target, as_of=as_of, limit=limit))
    print(json.dumps(doc, indent=2) if as_json else present_graph.related_text(doc, _CLI_CHARS))


@app.command()
def impact(
    paths: Annotated[list[Path], typer.Argument(help="Files about to change.")],
    depth: Annotated[int, typer.Option(help="Steps of reverse imports and calls.")] = 2,
    data_dir: DataDir = None,
    redis_url: RedisUrl = None,
    surreal_url: SurrealUrl = None,
    as_json: AsJson = False,
) -> None:
    """What depends on these files, the tests among them, and errors after earlier edits."""
    from memoryd.agent import present_graph

    settings = _client(data_dir, redis_url, surreal_url)
    doc = _with_client(
        settings, lambda memoryd: memoryd.impact([str(p) for p in paths], depth=depth)
    )
    print(json.dumps(doc, indent=2) if as_json else present_graph.impact_text(doc, _CLI_CHARS))


@app.command()
def session(
    session_id: Annotated[str, typer.Argument(help="A session id (or its unique prefix).")],
    data_dir: DataDir = None,
    redis_url: RedisUrl = None,
    surreal_url: SurrealUrl = None,
    as_json: AsJson = False,
) -> None:
    """Replay a session in order: goal, actions with outcomes, errors, subagents."""
    settings = _client(data_dir, redis_url, surreal_url)
    doc = _with_client(settings, lambda memoryd: memoryd.session(session_id))
    if as_json:
        print(json.dumps(doc, indent=2))
        return
    print(f"{doc['session']}  {doc['agent']}  {doc['cwd'] or ''}  {doc['git_branch'] or ''}")
    print(f"goal: {one_line(doc['goal'])}")
    for ev in doc["events"]:
        edges = "; ".join(
            f"{e['verb']} {e['target']}"
            + (f" [{e['outcome']}]" if e["outcome"] else "")
            + (f" [{e['reason']}]" if e["reason"] else "")
            for e in ev["edges"]
        )
        tool = f" {ev['tool']}" if ev["tool"] else ""
        print(f"{ev['seq']:>5} {ev['kind']}{tool}: {one_line(ev['text'])}")
        if edges:
            print(f"        -> {edges}")
    for sub in doc["subagents"]:
        print(f"subagent {sub['session']}: {sub['description'] or ''}")


def _timestamp(text: str) -> datetime:
    """An ISO-8601 time (naive means local time), in UTC."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        _fail(MemorydError(f"--as-of: not an ISO-8601 time: {text!r}"))
        raise
    return moment.astimezone(UTC)


maintenance_app = typer.Typer(help="Scheduled upkeep, run now: decay, prune, reembed.")
app.add_typer(maintenance_app, name="maintenance")
TASKS = tuple(jobs.MAINTENANCE)


@maintenance_app.command("run")
def maintenance_run(
    task: Annotated[str, typer.Argument(help=f"One of: {', '.join(TASKS)}.")],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="prune: only show what would go.")
    ] = False,
    data_dir: DataDir = None,
    redis_url: RedisUrl = None,
    surreal_url: SurrealUrl = None,
    as_json: AsJson = False,
) -> None:
    """Run one maintenance task now, through the queue, and print what it did."""
    _run_maintenance(task, dry_run, _client(data_dir, redis_url, surreal_url), as_json)


@app.command()
def prune(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only count what would go, per table.")
    ] = False,
    data_dir: DataDir = None,
    redis_url: RedisUrl = None,
    surreal_url: SurrealUrl = None,
    as_json: AsJson = False,
) -> None:
    """Prune now (what `memoryd maintenance run prune` does); --dry-run shows what would go."""
    _run_maintenance(jobs.PRUNE.name, dry_run, _client(data_dir, redis_url, surreal_url), as_json)


def _run_maintenance(task: str, dry_run: bool, settings: Settings, as_json: bool) -> None:
    if task not in TASKS:
        _fail(MemorydError(f"unknown task {task!r}; choose from {', '.join(TASKS)}"))
    spec = jobs.MAINTENANCE[task]
    result = _with_client(settings, lambda memoryd: memoryd.maintenance(spec, dry_run))
    print(json.dumps(result, indent=2) if as_json else f"{task}: {json.dumps(result)}")


@app.command()
def reindex(
    data_dir: DataDir = None,
    redis_url: RedisUrl = None,
    surreal_url: SurrealUrl = None,
    as_json: AsJson = False,
) -> None:
    """Rebuild the search indexes (BM25 and vectors, in the data dir) from the database."""
    settings = _client(data_dir, redis_url, surreal_url)
    result = _with_client(settings, lambda memoryd: memoryd.reindex())
    print(json.dumps(result, indent=2) if as_json else f"reindex: {json.dumps(result)}")


@app.command()
def pin(
    memory_id: Annotated[str, typer.Argument(help="A memory id (from search --kind memory).")],
    unpin: Annotated[bool, typer.Option("--unpin", help="Let it decay again.")] = False,
    data_dir: DataDir = None,
    redis_url: RedisUrl = None,
    surreal_url: SurrealUrl = None,
) -> None:
    """Pin a memory: it keeps importance 1 and is never pruned."""
    settings = _client(data_dir, redis_url, surreal_url)
    done = _with_client(settings, lambda memoryd: memoryd.pin(memory_id, not unpin))
    print(f"{done['memory']}: {'pinned' if done['pinned'] else 'unpinned'}")


@app.command("export")
def export_graph(
    project: Annotated[
        str | None, typer.Option(help="Only this project (id, name or root).")
    ] = None,
    data_dir: DataDir = None,
    redis_url: RedisUrl = None,
    surreal_url: SurrealUrl = None,
) -> None:
    """Write records, edges and entities to stdout as JSON lines (vectors are re-embeddable)."""
    settings = _client(data_dir, redis_url, surreal_url)
    rows = _with_client(settings, lambda memoryd: memoryd.export(sys.stdout.buffer, project))
    _err().print(f"{rows} rows exported")


@app.command("import")
def import_graph(
    file: Annotated[Path, typer.Argument(help="A `memoryd export` file (or a .jsonl.zst backup).")],
    data_dir: DataDir = None,
    redis_url: RedisUrl = None,
    surreal_url: SurrealUrl = None,
    as_json: AsJson = False,
) -> None:
    """Load an export into this data dir; `reembed` gives the rows their vectors back."""
    settings = _client(data_dir, redis_url, surreal_url)
    if not file.is_file():
        _fail(MemorydError(f"{file} is not a file"))
    counts = _with_client(settings, lambda memoryd: memoryd.import_file(file))
    print(json.dumps(counts, indent=2) if as_json else f"imported {json.dumps(counts)}")


@app.command()
def forget(
    session: Annotated[
        str | None, typer.Option(help="A session id (or its unique prefix).")
    ] = None,
    project: Annotated[str | None, typer.Option(help="A project id, name or root.")] = None,
    path: Annotated[str | None, typer.Option(help="A glob of absolute file paths.")] = None,
    before: Annotated[
        str | None, typer.Option(help="Everything before this ISO-8601 time.")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only show what would go.")] = False,
    data_dir: DataDir = None,
    redis_url: RedisUrl = None,
    surreal_url: SurrealUrl = None,
    as_json: AsJson = False,
) -> None:
    """Remove records, their edges and vectors for good; a forgotten session never comes back."""
    given = {k: v for k, v in (("session", session), ("project", project), ("path", path),
                                ("before", before)) if v is not None}  # fmt: skip
    if len(given) != 1:
        _fail(MemorydError("give exactly one of --session, --project, --path, --before"))
    [(scope, value)] = given.items()
    if scope == "path" and not value.startswith(("/", "*")):
        value = os.path.abspath(value)
    settings = _client(data_dir, redis_url, surreal_url)
    done = _with_client(settings, lambda memoryd: memoryd.forget_scope(scope, value, dry_run))
    if as_json:
        print(json.dumps(done, indent=2))
        return
    verb = "would remove" if dry_run else "removed"
    counts = ", ".join(f"{t} {n}" for t, n in sorted(done["removed"].items())) or "nothing"
    print(f"{verb}: {counts}")
    if done["removed"] and not dry_run and settings.surreal_url is None:
        _err().print(
            "the embedded database's files keep the deleted values' bytes until "
            "`memoryd compact` (run with the daemon stopped)"
        )


@app.command()
def compact(data_dir: DataDir = None, as_json: AsJson = False) -> None:
    """Write the embedded database again with its live rows only, so that what `forget`
    deleted leaves its files too (the engine keeps deleted values' bytes). Stop the daemon
    first."""
    from memoryd.database.compact import DB_DIR, size
    from memoryd.database.compact import compact as rewrite

    settings = _client(data_dir, None, None)
    before = size(settings.data_dir / DB_DIR)
    rows = _run(lambda: rewrite(settings))
    done = {"rows": rows, "bytes_before": before, "bytes_after": size(settings.data_dir / DB_DIR)}
    if as_json:
        print(json.dumps(done, indent=2))
        return
    print(
        f"compacted {sum(rows.values())} rows in {len(rows)} tables: "
        f"{before / 1e6:.1f} MB -> {done['bytes_after'] / 1e6:.1f} MB"
    )


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@app.command()
def pause(
    for_: Annotated[
        str | None,
        typer.Option("--for", help="How long: 90s, 30m, 2h, 1d (default: until resume)."),
    ] = None,
    data_dir: DataDir = None,
    redis_url: RedisUrl = None,
    surreal_url: SurrealUrl = None,
) -> None:
    """Stop capture (transcripts and code): nothing new is remembered; search goes on."""
    seconds = None
    if for_ is not None:
        number, unit = for_[:-1], for_[-1:]
        if unit not in _UNITS or not number.isdigit() or int(number) == 0:
            _fail(MemorydError(f"--for: expected a duration such as 90s, 30m, 2h, 1d: {for_!r}"))
        seconds = int(number) * _UNITS[unit]
    settings = _client(data_dir, redis_url, surreal_url)
    _with_client(settings, lambda memoryd: memoryd.pause(seconds))
    print(f"capture paused{f' for {for_}' if for_ else ''}; `memoryd resume` turns it on again")


@app.command()
def resume(
    catch_up: Annotated[
        bool, typer.Option("--catch-up", help="Read what transcripts gained while paused.")
    ] = False,
    data_dir: DataDir = None,
    redis_url: RedisUrl = None,
    surreal_url: SurrealUrl = None,
    as_json: AsJson = False,
) -> None:
    """Turn capture on again; what happened while paused is skipped unless --catch-up."""
    settings = _client(data_dir, redis_url, surreal_url)
    done = _with_client(settings, lambda memoryd: memoryd.resume(catch_up))
    if as_json:
        print(json.dumps(done, indent=2))
    elif done["paused_since"] is None:
        print("capture was not paused")
    else:
        print(
            f"capture resumed (paused since {done['paused_since']}): {done['caught_up']} "
            f"transcripts caught up, {done['skipped']} skipped to their end"
        )


@app.command()
def ui(
    port: Annotated[int, typer.Option(help="The page's port on 127.0.0.1 (0: any free one).")] = 0,
    open_page: Annotated[
        bool, typer.Option("--open/--no-open", help="Open it in a browser (on a desktop).")
    ] = True,
    data_dir: DataDir = None,
    redis_url: RedisUrl = None,
    surreal_url: SurrealUrl = None,
) -> None:
    """A web page of what memoryd remembers: projects, sessions, files, search, and what to
    forget. The daemon serves it on loopback from now on; this prints its address (with the
    token that signs the browser in). In server mode (no daemon here) this process serves it,
    reading through the queue, until stopped."""
    from memoryd import channel, client
    from memoryd.ui import UI_QUERY

    settings = _client(data_dir, redis_url, surreal_url)
    if channel.listening(settings.channel_socket):
        url = _run(lambda: channel.ask(settings.channel_socket, UI_QUERY, (port,), 60))
        _show_page(url, open_page)
        return
    from memoryd.ui.app import UiServer

    async def serve_here() -> None:
        async with client.connect(settings):  # fails at once when nothing serves the queue
            pass
        page = UiServer(settings, lambda: client.connect(settings))
        try:
            _show_page(await page.open(port), open_page)
            await page.wait()
        finally:
            await page.close()

    _run(serve_here)


def _show_page(url: str, open_page: bool) -> None:
    import os
    import sys
    import webbrowser

    print(url, flush=True)
    desktop = (
        sys.platform == "darwin" or os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    )
    if open_page and desktop:
        webbrowser.open(url)


@app.command()
def status(
    data_dir: DataDir = None,
    redis_url: RedisUrl = None,
    surreal_url: SurrealUrl = None,
    as_json: AsJson = False,
) -> None:
    """Queue depth, rows per table, data dir, and which Redis and SurrealDB are in use."""
    settings = _client(data_dir, redis_url, surreal_url)
    if (starting := _daemon_not_answering(settings)) is not None:
        # Its database is not open to queries yet: opening it here would take it from the
        # daemon. What is known without it, said so, with exit code 3.
        from memoryd.client import local_status

        info = {**local_status(settings), "daemon_running": False, "daemon_starting": starting}
        if as_json:
            print(json.dumps(info, indent=2, default=str))
        else:
            status_head(info)
            print(
                f"daemon        starting or stopping (pid {starting}): its database is not open "
                "to queries; ask again in a moment"
            )
        raise typer.Exit(3)
    info = _status_over_channel(settings) or _with_client(
        settings, lambda memoryd: memoryd.status()
    )
    if as_json:
        print(json.dumps(info, indent=2, default=str))
        return
    print_status(info)


def _status_over_channel(settings: Settings) -> dict[str, Any] | None:
    """The daemon's status over its channel with no event loop (asyncio, imported and started,
    is a sixth of what status may take); None when no daemon answers there."""
    from memoryd import channel
    from memoryd.client import local_status
    from memoryd.errors import DaemonUnavailable

    try:
        info = channel.ask_blocking(settings.channel_socket, jobs.STATUS.name, (), 120.0)
    except DaemonUnavailable:
        return None
    return {**local_status(settings), **info}


def _daemon_not_answering(settings: Settings) -> int | None:
    """The pid of a daemon of this data dir that does not answer on its channel yet (it is
    starting, or stopping), else None."""
    from memoryd import channel
    from memoryd.liveness import holder
    from memoryd.paths import daemon_lock_path

    owner = holder(daemon_lock_path(settings.data_dir))
    if owner is None or channel.listening(settings.channel_socket):
        return None
    return owner


@app.command()
def doctor(
    check: Annotated[
        list[str] | None,
        typer.Option(
            "--check",
            help="Run only this check (repeatable): data_dir, redis, database, model, repos, "
            "transcripts, inotify or agents.",
        ),
    ] = None,
    repo: Repos = None,
    data_dir: DataDir = None,
    redis_url: RedisUrl = None,
    surreal_url: SurrealUrl = None,
    as_json: AsJson = False,
) -> None:
    """Check the setup (Redis, database, model, watched paths, inotify) and say what to fix."""
    from memoryd.cli import doctor as doctor_checks

    _setup_logging("WARNING")
    settings = _settings(
        data_dir=data_dir, redis_url=redis_url, surreal_url=surreal_url, extra_repos=repo
    )
    checks = _run(lambda: doctor_checks.diagnose(settings, check))
    if as_json:
        print(json.dumps([c.as_dict() for c in checks], indent=2))
    else:
        print(doctor_checks.render(checks))
    raise typer.Exit(doctor_checks.exit_code(checks))


app.command()(agent_cli.mcp)
app.command()(agent_cli.integrate)
app.add_typer(agent_cli.hook_app, name="hook")

service_app = typer.Typer(
    help="Run memoryd as a user service (systemd on Linux, launchd on macOS).",
    no_args_is_help=True,
)
app.add_typer(service_app, name="service")


def _report(lines: list[str], ok: bool) -> None:
    for line in lines:
        _err().print(line, highlight=False, soft_wrap=True)
    if not ok:
        raise typer.Exit(1)


@service_app.command("install")
def service_install(
    data_dir: DataDir = None,
    start: Annotated[
        bool, typer.Option("--start/--no-start", help="Enable and (re)start it now.")
    ] = True,
    sandbox: Annotated[
        bool | None,
        typer.Option(
            "--sandbox/--no-sandbox",
            help="Filesystem sandbox in the systemd unit (default: when this system supports it).",
        ),
    ] = None,
) -> None:
    """Write the unit (or plist) for this memoryd and data dir, enable and start it."""
    from memoryd.cli import service_manager
    from memoryd.paths import config_file

    settings = _settings(data_dir=data_dir)
    try:
        kind = service_manager.platform_kind()
        spec = service_manager.make_spec(settings.data_dir, config_file().absolute(), sandbox, kind)
        report = service_manager.install(spec, kind, start)
    except MemorydError as exc:
        _fail(exc)
        raise
    _report(report.lines, report.ok)


@service_app.command("uninstall")
def service_uninstall(
    purge: Annotated[
        bool,
        typer.Option(
            "--purge", help="Also delete the data dir and the config file: every memory, for good."
        ),
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask before --purge.")] = False,
    data_dir: DataDir = None,
) -> None:
    """Stop and disable the service and remove its file (data and config are kept unless
    --purge)."""
    from memoryd.cli import service_manager

    try:
        kind = service_manager.platform_kind()
        # The data dir and config the service ran with are the ones to purge (a --data-dir
        # given to `service install` is pinned in its file, not in the config).
        pinned = service_manager.pinned_environment(kind) if purge else {}
        report = service_manager.uninstall(kind, keep_data=not purge)
    except MemorydError as exc:
        _fail(exc)
        raise
    for line in report.lines:
        _err().print(line, highlight=False, soft_wrap=True)
    os.environ.update(pinned)  # as the service saw them; --data-dir still wins
    # Whatever the service manager said: a daemon still running is refused.
    purged = _purge(_settings(data_dir=data_dir), yes) if purge else True
    if not report.ok or not purged:
        raise typer.Exit(1)


def _purge(settings: Settings, yes: bool) -> bool:
    """Remove the data dir and the config file; False when memoryd's data also lives
    elsewhere (an external database or Redis), which a purge cannot reach."""
    from memoryd.cli import purge
    from memoryd.paths import config_file

    try:
        found = purge.plan(settings, config_file().absolute())
    except MemorydError as exc:
        _fail(exc)
        raise
    targets = found.describe()
    if not targets:
        _err().print(f"{settings.data_dir} does not exist and there is no config file")
    elif not yes and not typer.confirm(
        "Delete everything memoryd remembers and its config?\n  " + "\n  ".join(targets)
    ):
        _fail(MemorydError("nothing deleted"))
    try:
        removed = purge.execute(found, settings)
    except MemorydError as exc:
        _fail(exc)
        raise
    hints = [
        f"{client} still runs memoryd's hooks or MCP server: memoryd integrate {client} --uninstall"
        for client in purge.still_registered()
    ]
    for line in [*removed, *found.elsewhere, *hints]:
        _err().print(line, highlight=False, soft_wrap=True)
    return not found.elsewhere


@service_app.command("status")
def service_status(as_json: AsJson = False) -> None:
    """Whether the service is installed, which memoryd it runs, and its state."""
    from memoryd.cli import service_manager

    try:
        state = service_manager.status(service_manager.platform_kind())
    except MemorydError as exc:
        _fail(exc)
        raise
    if as_json:
        print(json.dumps(state.as_dict(), indent=2))
    else:
        print("\n".join(state.lines()))


def main() -> None:  # pragma: no cover - console entry point alias
    app()
