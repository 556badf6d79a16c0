"""Distinct task-style queries for the latency benches, so that every timed search computes its
query's vector afresh as a user's new question does: the daemon keeps the vectors of its last
64 queries (memoryd/embedding.py, RECENT_QUERIES), and a bench that repeats a few queries
measures that cache, not the model (a fresh vector costs ~6 ms of CPU, more than a 100k-row
search)."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count, islice

ACTIONS = (
    "parse",
    "retry",
    "validate",
    "render",
    "watch",
    "read",
    "cache",
    "serialize",
    "close",
    "log",
    "compare",
    "encode",
)
OBJECTS = (
    "a connection url",
    "a failed job",
    "settings from the environment",
    "a table in the terminal",
    "a directory for changes",
    "the config file",
    "the http response headers",
    "a cron schedule",
    "the lock file",
    "unicode text",
    "the session cookie",
    "a subprocess timeout",
)
CONTEXTS = ("", " in the tests", " for the command line", " after an error", " on shutdown")


def fresh_queries() -> Iterator[str]:
    """An endless run of queries, no two the same: every action and object in each context,
    then again with a round number (720 distinct before the first number)."""
    for round_ in count():
        suffix = f" (case {round_})" if round_ else ""
        for context in CONTEXTS:
            for action in ACTIONS:
                for thing in OBJECTS:
                    yield f"{action} {thing}{context}{suffix}"


def take(n: int, skip: int = 0) -> list[str]:
    """Queries `skip` .. `skip + n` of `fresh_queries`: benches that run several phases skip
    the ones an earlier phase asked, so no phase finds its vectors cached."""
    return list(islice(fresh_queries(), skip, skip + n))
