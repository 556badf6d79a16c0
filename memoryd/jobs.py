"""Every job memoryd runs, declared once: its name, its queue and how often it may be tried.

The worker registry (workers/registry.py) binds each to its function, and every enqueue goes
through memoryd/queue.py with one of these, so a job's name is written nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

# Heavy work (indexing, ingestion, upkeep) and interactive queries live on separate queues, so a
# search answers while a cold index is still running.
JOBS_QUEUE = "memoryd:jobs"
QUERY_QUEUE = "memoryd:queries"


@dataclass(frozen=True, slots=True)
class JobSpec:
    """``max_tries``: work jobs are idempotent (deterministic ids, upserts), so a retry after a
    crash is safe; a query is asked again by its caller instead."""

    name: str
    queue: str
    max_tries: int

    @property
    def is_query(self) -> bool:
        return self.queue == QUERY_QUEUE


_DECLARED: list[JobSpec] = []


def _declared(spec: JobSpec) -> JobSpec:
    _DECLARED.append(spec)
    return spec


def _work(name: str) -> JobSpec:
    return _declared(JobSpec(name, JOBS_QUEUE, 3))


def _query(name: str) -> JobSpec:
    return _declared(JobSpec(name, QUERY_QUEUE, 1))


INDEX_FILES = _work("index_files")
# The second phase of indexing: vectors for chunks already written (and searchable by words).
EMBED_CHUNKS = _work("embed_chunks")
INGEST_TRANSCRIPT = _work("ingest_transcript")
DECAY = _work("decay")
PRUNE = _work("prune")
REEMBED = _work("reembed")
IMPORT_ROWS = _work("import_rows")
FORGET_SCOPE = _work("forget_scope")
SKIP_TRANSCRIPTS = _work("skip_transcripts")
REINDEX = _work("reindex")
# CHANGES_WITH from the commits new to a project's history window (workers/stages/codegraph).
COCHANGE = _work("cochange")
MAINTENANCE = {job.name: job for job in (DECAY, PRUNE, REEMBED)}

SEARCH = _query("search")
STATUS = _query("status")
REGISTER_PROJECT = _query("register_project")
STORED_PATHS = _query("stored_paths")
HISTORY = _query("history")
SESSION = _query("session")
PIN = _query("pin")
EXPORT_TABLES = _query("export_tables")
EXPORT_PAGE = _query("export_page")
PROJECTS = _query("projects")
GET = _query("get")
TIMELINE = _query("timeline")
RECENT_ACTIVITY = _query("recent_activity")
# Agent-written memories are small and interactive: they run on the query queue.
REMEMBER = _query("remember")
# Whether the code memories point at is still what they saw (memoryd/anchors.py).
ANCHORS = _query("anchors")
# What a memory's session went on to change (the prompt hook says it with the memory).
THEN_MODIFIED = _query("then_modified")
FORGET = _query("forget")
INDEX_PROGRESS = _query("index_progress")
# Transcripts the daemon follows that changed since a time (`memoryd resume`).
CHANGED_TRANSCRIPTS = _query("changed_transcripts")
# An agent's hook: its JSON in, the context to inject out (memoryd/agent/hooks.py).
HOOK = _query("hook")
# The code graph around a file, symbol or chunk, and what depends on files
# (workers/stages/codegraph).
RELATED = _query("related")
IMPACT = _query("impact")

# What the graph knows at the moment of action: a file about to be edited, a failure just met.
FILE_CONTEXT = _query("file_context")
ERROR_CONTEXT = _query("error_context")

# What the hooks injected lately (their records, read in the daemon's data dir).
INJECTIONS = _query("injections")
# memoryd's own numbers, a row a day (`status` records them).
DAILY_STATS = _query("daily_stats")


# Every job above, in the order declared (declare new ones above this line): the registry binds
# a function to each.
ALL = tuple(_DECLARED)
