"""How the CLI says things to people: text cut to one line, `status` a line per fact, a
maintenance result on one line."""

from __future__ import annotations

from datetime import datetime
from typing import Any


def one_line(text: str | None, width: int = 120) -> str:
    flat = " ".join((text or "-").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def print_status(info: dict[str, Any]) -> None:
    """`status` for people: a line per fact."""
    status_head(info)
    print(f"daemon        {'running' if info['daemon_running'] else 'not running'}")
    if info["paused_since"]:
        print(f"capture       paused since {info['paused_since']} (`memoryd resume`)")
    print(f"model         {info['model']}")
    kept = info["remembered"]
    print(
        "agents        "
        + ", ".join(f"{a} {'on' if on else 'off'}" for a, on in kept["agents"].items())
    )
    for label in ("transcripts", "repos", "exclude", "include"):
        print(f"{label:<14}{', '.join(kept[label]) or '-'}")
    first = sum(info["waiting_for_first_vector"].values())
    if first:
        print(f"vectors       {first} rows wait for their first vector")
    waiting = sum(info["waiting_for_reembed"].values())
    print(f"re-embedding  {waiting} rows wait for the configured model")
    print(f"schema        {info['schema_version']}")
    q = info["queue"]
    oldest = q["oldest_job_age_seconds"]
    waited = f", oldest waiting {oldest:.0f}s" if oldest is not None else ""
    print(
        f"queue         {q['jobs']} jobs waiting{waited}, {q['queries']} queries; last hour "
        f"{q['last_hour']['done']} done, {q['last_hour']['failed']} failed"
    )
    if info["database_bytes"] is not None:
        print(f"database size {info['database_bytes'] / 1e6:.1f} MB")
    for root, lag in info["transcript_lag"].items():
        print(f"transcripts   {root}: {lag['bytes']} bytes in {lag['files']} files not ingested")
    ago = info["counted_seconds_ago"]
    print(f"rows          {'counted now' if ago < 1 else f'counted {ago:.0f}s ago'}")
    for table, n in info["counts"].items():
        print(f"  {table:<14}{n}")
    print(f"  {'valid chunks':<14}{info['valid_chunks']}")
    for p in info["projects"]:
        progress = progress_line(p, ago)
        print(f"project       {p['id']}  {p['root']}  {progress}")
        if p["index"] and p["index"]["last_error"]:
            print(f"              last error: {one_line(p['index']['last_error'])}")
    for f in info["skipped_files"]:
        where = f["project"] or "transcript"
        print(f"skipped       {where}  {f['path']}: {one_line(f['reason'])}")
    for task, run in info["maintenance"].items():
        print(f"last {task:<9}{run['finished_at']}  {summary(run['result'])}")


def status_head(info: dict[str, Any]) -> None:
    print(f"data dir      {info['data_dir']}")
    print(f"config file   {info['config_file']}")
    print(f"redis         {info['redis']} ({info['redis_mode']})")
    print(f"surrealdb     {info['surreal']} ({info['surreal_mode']})")


def progress_line(project: dict[str, Any], counted_ago: float) -> str:
    """`ready 120/120 files, 950 chunks, <start> .. <end>` (or `indexing … since <start>`),
    and how many chunks, found by words already, still wait for their vectors, with the vectors
    done, the pass they wait for and the time left: while any wait, the project is
    `embedding`, not `ready` (the counts are as old as the row counts)."""
    index, owed = project["index"], project["vectors_owed"]
    if index is None:
        return "not indexed yet"
    state = "embedding" if index["state"] == "ready" and owed else index["state"]
    done = f"{state} {index['files_done']}/{index['files_total']} files"
    started = short_time(index["started_at"])
    when = (
        f"{started} .. {short_time(index['finished_at'])}"
        if index["finished_at"]
        else f"since {started}"
    )
    age = f", counted {counted_ago:.0f}s ago" if counted_ago >= 1 else ""
    vectors = ""
    if owed:
        left = project["vectors_seconds_left"]
        eta = f"about {duration(left)} left" if left is not None else "time left not known yet"
        vectors = (
            f" ({project['vectors_done']} vectors done, {owed} waiting for the "
            f"{project['vector_pass']} pass, {eta}{age})"
        )
    return f"{done}, {index['chunks']} chunks{vectors}, {when}"


def duration(seconds: int) -> str:
    """`45s`, `12 min`, `3.5 h`."""
    if seconds < 90:
        return f"{seconds}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def short_time(iso: str) -> str:
    """`2026-11-23T11:36:59.611335Z` as `2026-11-23 11:36:59Z`: seconds are enough here."""
    return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M:%SZ")


def summary(result: Any, width: int = 100) -> str:
    """A maintenance result on one line: `key value` pairs (nested keys dotted), cut after the
    last pair that fits, never inside one."""

    def pairs(value: Any, prefix: str = "") -> list[str]:
        if isinstance(value, dict):
            return [p for k, v in value.items() for p in pairs(v, f"{prefix}{k}.")]
        if isinstance(value, list):
            return [f"{prefix[:-1]} [{len(value)}]"]
        return [f"{prefix[:-1]} {value}"]

    line = ""
    for pair in pairs(result) if isinstance(result, dict) else [str(result)]:
        more = f"{line}, {pair}" if line else pair
        if len(more) > width:
            return f"{line}, …" if line else pair[: width - 1] + "…"
        line = more
    return line
