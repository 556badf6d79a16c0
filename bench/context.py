"""Does the hooks' context help? What memoryd injects at the start of a session, replayed from
real repositories' histories, against a code-only search of the same budget and against nothing.

    .venv/bin/python -m bench.context [GIT_DIR...] [--name OWNER/NAME...] [--work DIR]
        [--sessions 10] [--earlier 2]

GIT_DIR: a repository with real history (a bare git dir or a working tree), fetched outside
this repository. The standard setting (README, "bench/context.py"), 10 sessions each of six
repositories that committed aider's `.aider.chat.history.md`: the two of the first setting
whose HEAD has at most 300 files (the first index is most of a repository's time), and the
first four others in the order the code index lists such repositories whose snapshot holds
every tree the bench checks out (a snapshot lacks files of 4 MiB and more), whose HEAD has at
most 300 files and at least 20 of whose commits qualify as sessions (below); a rule fixed
before their results were seen. The sessions' rule, fixed before any result was seen:

Sessions. Public repositories that committed aider's `.aider.chat.history.md` rarely kept a
history with several editing sessions (the ones fetched for this bench held 0 to 3), so
sessions are reconstructed from each repository's own history: each non-merge commit of
HEAD's first-parent line is one session, its message the session's first prompt, its changed
files its edits. The replayed transcript is an aider chat log of those sessions, as aider
writes one (`# aider chat started at <commit time>`, `#### <message>`, `> Applied edit to
<file>` per changed file), kept in the tree, so memoryd ingests it as it ingests aider's own;
its times are shifted so that the session evaluated starts now (the briefing looks at the
week before it). Each step writes the log anew and memoryd reads it again from its start: the
sessions and prompts take the new times, but an edit keeps those of the step that first read
it (the ingester updates only an action edge's target), so an earlier session's edits may
look more recent than they were, by at most the time from its commit to the evaluated one's.

Evaluated sessions: the newest `--sessions` commits that change 1 to 20 files of which at
least one exists in the tree before it. Before the first of them, up to REPLAY earlier
commits are replayed as sessions. For each evaluated session k: the tree is checked out at
k's parent and indexed (the daemon's own jobs, vectors included), sessions up to k-1 are in
the log and ingested, and then
- memoryd: what the hooks inject for a new session of k: SessionStart's briefing and the
  first prompt's UserPromptSubmit, each at most HOOK_CHARS (2,000 characters together);
- code only: the top code chunks of memoryd's search for the prompt (no memories), printed
  as the prompt hook prints code, packed into the same 2,000 characters;
- nothing: no context (recall 0).
Measures, per session, averaged over sessions: file recall, the share of the files k changes
(that exist in the tree before it) named in the injected text (its relative path, or its
file name when that name is unique in the tree); precision, the share of injected characters
in items (`- ` lines with what follows them) that name a file k changes (reconstructed
sessions have no errors or decisions of their own to name). Target: memoryd's recall ahead of
the code-only baseline by >= 0.10. Printed with that gain: its standard error over the
sessions, and how many sessions tie, are ahead and are behind (with 10 sessions a repository,
one file of one session moves the gain by 0.02 to 0.03).

Before session k's first edit (of a file there before it), in the same session: what the
pre-edit hook (PreToolUse on Edit) says, printed, with its recall of the other files k changes
and its precision, measured the same way (the edited file itself is named by the hook's head).
Printed too, not the target's measure: memoryd's recall with that text added (the edited file
counting only if the first two hooks named it), against code only given as many more
characters.

After a failure: the histories reconstructed from commits have no failures, so the real
Claude Code fixture of bench/agent_latency.py (21 failures) is replayed: `--earlier` copies of
its session as sessions 1..k-1, then its failures in order as session k's, each given to the
post-tool hook. Resolution recall: of the failures whose signature an earlier session saw and
resolved (RESOLVED_BY), the share whose earlier resolution is in what the hook injected in
session k by then. Target >= 0.8.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from bench.agent_latency import fixture_copies, fixture_tree
from bench.task_queries import git, repo_name
from memoryd import client, projects, queue
from memoryd.agent import hooks
from memoryd.agent_shared import qualified
from memoryd.config import load_settings
from memoryd.daemon.runtime import Runtime
from memoryd.ids import entity_id
from memoryd.results import FILE_KINDS, SearchRequest
from memoryd.store import plain
from memoryd.vocabulary import ERROR
from memoryd.watch.transcripts import AIDER_LOG
from workers.stages.entities import canonical_error

REPLAY = 40
MAX_FILES = 20
HOOK_CHARS = 1000
BUDGET = 2 * HOOK_CHARS
CODE_HITS = 20
TARGET = 0.10
RESOLUTION_TARGET = 0.8
TIME = "%Y-%m-%d %H:%M:%S"
# A commit's fields in `git log` output, split on these marks.
_COMMIT, _FIELD = "\x1e", "\x1f"


@dataclass(frozen=True, slots=True)
class Session:
    sha: str
    parent: str | None
    at: str  # the commit's time in its own zone, as aider writes its own
    prompt: str
    files: tuple[str, ...]


def sessions(git_dir: Path) -> list[Session]:
    """HEAD's first-parent non-merge commits, oldest first."""
    log = git(
        git_dir,
        "log",
        "--first-parent",
        "--no-merges",
        "--reverse",
        f"--date=format:{TIME}",
        f"--format={_COMMIT}%H{_FIELD}%P{_FIELD}%ad{_FIELD}%B{_FIELD}",
        "--name-only",
        "HEAD",
    )
    found = []
    for entry in log.split(_COMMIT)[1:]:
        sha, parents, at, message, files = entry.split(_FIELD)
        found.append(
            Session(
                sha,
                parents.split()[0] if parents.split() else None,
                at,
                " ".join(message.split()),
                tuple(f for f in files.split("\n") if f.strip()),
            )
        )
    return found


def tree_files(git_dir: Path, sha: str) -> set[str]:
    return set(git(git_dir, "ls-tree", "-r", "--name-only", sha).splitlines())


def aider_log(replayed: list[Session], shift: timedelta) -> str:
    """The chat log aider would have written for these sessions, `shift` later."""
    parts = []
    for s in replayed:
        at = (datetime.strptime(s.at, TIME) + shift).strftime(TIME)
        edits = "".join(f"> Applied edit to {f}  \n" for f in s.files)
        parts.append(f"\n# aider chat started at {at}\n\n#### {s.prompt}  \n\n{edits}\n")
    return "".join(parts)


def named(text: str, path: str, unique: dict[str, int]) -> bool:
    if path in text:
        return True
    base = path.rsplit("/", 1)[-1]
    return (
        unique.get(base) == 1 and re.search(rf"(?<![\w./-]){re.escape(base)}\b", text) is not None
    )


async def misses(
    memoryd: client.Client,
    prompt: str,
    project: str,
    missed: list[str],
    earlier: list[Session],
    baseline: str,
    unique: dict[str, int],
) -> list[str]:
    """Why memoryd's hooks did not name each of these files: whether the code-only baseline
    named it, where the prompt hook's own search ranked its best row (kind, rank among that
    kind's hits, relevance; the hook's floor is memoryd's hook_min_relevance) and how many
    replayed sessions before k one last modified it."""
    # Only the kinds that are rows of files: a search of memories counts as reading them
    # (access counts), which would change what later sessions are shown.
    limits = tuple((kind, n) for kind, n in hooks.PROMPT_HITS if kind in FILE_KINDS)
    kinds = tuple(kind for kind, _ in limits)
    request = SearchRequest(prompt, kinds, project=project, limits=limits)
    found = (await memoryd.search(request)).hits
    lines = []
    for f in missed:
        ranks = {h.kind: 0 for h in found}
        best = None
        for h in found:
            ranks[h.kind] += 1
            if h.path == f and best is None:
                best = f"{h.kind} #{ranks[h.kind]} at {h.score:.2f}"
        ago = next((n for n, s in enumerate(reversed(earlier), 1) if f in s.files), None)
        lines.append(
            f"      missed {f}: code only {'named it' if named(baseline, f, unique) else 'no'}; "
            f"prompt search {best or 'no row'}; "
            + (f"modified {ago} sessions before" if ago else "modified by no replayed session")
        )
    return lines


def indent(text: str) -> str:
    return "\n".join("      " + line for line in text.splitlines()) or "      (nothing)"


def items(text: str) -> list[str]:
    """The items of an injected text: a `- ` line and the lines after it up to the next."""
    found: list[str] = []
    for line in text.splitlines():
        if line.startswith("- ") or not found:
            found.append(line)
        else:
            found[-1] += "\n" + line
    return [item for item in found if item.startswith("- ")]


def measure(text: str, relevant: set[str], unique: dict[str, int]) -> tuple[float, float]:
    """(file recall, precision) of an injected text."""
    recall = sum(named(text, f, unique) for f in relevant) / len(relevant)
    useful = sum(len(i) for i in items(text) if any(named(i, f, unique) for f in relevant))
    return recall, (useful / len(text) if text else 0.0)


async def hook_text(memoryd: client.Client, command: str, payload: dict[str, object]) -> str:
    """What `memoryd hook claude-code <command>` injects."""
    out = await hooks.run(
        memoryd, "claude-code", command, json.dumps(payload), str(payload["cwd"]), HOOK_CHARS
    )
    return json.loads(out)["hookSpecificOutput"]["additionalContext"] if out else ""


async def code_only(
    memoryd: client.Client, prompt: str, project: str, budgets: tuple[int, ...]
) -> list[str]:
    """The code-only baseline packed into each of these budgets (one search)."""
    request = SearchRequest(prompt, limit=CODE_HITS, project=project)
    hits = (await memoryd.search(request)).hits
    if not hits:
        return ["" for _ in budgets]
    records = await memoryd.get(
        [qualified("code", h.id) for h in hits], hooks.ITEM_CHARS * len(hits)
    )
    head = "code related to this prompt:"
    items = [hooks.record_item(r) for r in records]
    return [hooks.pack(head, items, set(), budget)[0] for budget in budgets]


async def index(rt: Runtime, tree: Path) -> str:
    """The tree indexed (vectors included) and its history counted into CHANGES_WITH, which
    the pre-edit hook reads: none of it left to land while a hook runs."""
    assert rt.redis is not None
    project = projects.resolve(tree)
    for job, _ in await projects.sync(rt.redis, project, rt.settings.index_batch_files):
        await queue.embedded_later(rt.redis, await queue.wait_for(job, timeout=7200), 7200)
    head = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    if head.returncode == 0:  # else not a git tree: no history to count
        job = projects.cochange_job(rt.redis, project.id, head.stdout.strip())
        await queue.wait_for(job, timeout=7200)
    return project.id


def checkout(tree: Path, sha: str) -> None:
    """The tree at `sha`, the replayed log kept (a log the repository committed is its own)."""
    log = tree / AIDER_LOG
    kept = log.read_bytes() if log.exists() else b""
    subprocess.run(["git", "-C", str(tree), "checkout", "-q", "-f", sha], check=True)
    subprocess.run(["git", "-C", str(tree), "clean", "-q", "-f", "-d", "-x"], check=True)
    log.write_bytes(kept)


async def evaluate(
    git_dir: Path, name: str | None, count: int, work: Path, show: bool = False
) -> list[dict[str, float]]:
    git_dir = Path(git(git_dir, "rev-parse", "--absolute-git-dir").strip())
    label = repo_name(git_dir, name)
    history = sessions(git_dir)
    chosen = []
    for n, s in reversed(list(enumerate(history))):
        before = tree_files(git_dir, s.parent) if s.parent else set()
        if 1 <= len(s.files) <= MAX_FILES and before & set(s.files):
            chosen.append(n)
            if len(chosen) == count:
                break
    chosen.reverse()
    if not chosen:
        print(f"\n== {label}: no session qualifies")
        return []
    start = max(0, chosen[0] - REPLAY)
    place = work / label.replace("/", "+")
    tree = place / "tree"
    if not tree.exists():
        subprocess.run(
            ["git", "clone", "-q", "--no-checkout", "--shared", str(git_dir), str(tree)],
            check=True,
        )
    (tree / AIDER_LOG).unlink(missing_ok=True)
    print(
        f"\n== {label}: {len(history)} sessions (first-parent commits); {len(chosen)} evaluated "
        f"({history[chosen[0]].sha[:10]}..{history[chosen[-1]].sha[:10]}), "
        f"{chosen[0] - start} replayed before the first"
    )
    # A data dir kept from an earlier run holds the sessions after each k (they would leak
    # the future into k's context) and a record of what the hooks injected: only the clone
    # is kept.
    shutil.rmtree(place / "data", ignore_errors=True)
    rt = Runtime(load_settings(data_dir=place / "data"))
    await rt.start_queue(exclusive=True)
    await rt.serve()
    rows = []
    try:
        assert rt.redis is not None
        memoryd = client.Client(rt.redis, rt.settings)
        for n in chosen:
            s = history[n]
            assert s.parent is not None
            started = time.perf_counter()
            # As if session k started now: the briefing looks at the days before it. A new
            # file, which the ingester reads again from its start (same ids, this shift's
            # times) because its inode is not the one it read last: that file is held open
            # until the new one is in place, so the filesystem cannot hand its inode on (it
            # often did, and then only the appended sessions were read and the earlier ones
            # kept the times of an earlier shift, recent or not by chance).
            log = tree / AIDER_LOG
            with open(log, "rb") if log.exists() else contextlib.nullcontext():
                checkout(tree, s.parent)
                shift = datetime.now() - datetime.strptime(s.at, TIME)
                fresh = tree / (AIDER_LOG + ".new")
                fresh.write_text(aider_log(history[start:n], shift))
                os.replace(fresh, log)
            project = await index(rt, tree)
            await memoryd.ingest([str(tree / AIDER_LOG)])
            # The writes an ingest leaves to land later (its edits' code anchors) and those
            # each hook's reads leave (access counts): settled before the next step reads, so
            # what k is shown does not depend on how the writes and reads interleave.
            assert rt.store is not None
            await rt.store.settled(300)
            files = tree_files(git_dir, s.parent)
            relevant = set(s.files) & files
            unique: dict[str, int] = {}
            for f in files:
                unique[f.rsplit("/", 1)[-1]] = unique.get(f.rsplit("/", 1)[-1], 0) + 1
            base = {"session_id": f"bench-{s.sha}", "cwd": str(tree)}
            brief = await hook_text(memoryd, "session-start", base | {"source": "startup"})
            await rt.store.settled(300)
            prompt = await hook_text(memoryd, "user-prompt-submit", base | {"prompt": s.prompt})
            await rt.store.settled(300)
            injected = "\n".join(t for t in (brief, prompt) if t)
            # Before its first edit (of a file there before it), in the same session.
            first = next(f for f in s.files if f in relevant)
            edit = await hook_text(
                memoryd,
                "pre-tool-use",
                base | {"tool_name": "Edit", "tool_input": {"file_path": str(tree / first)}},
            )
            baseline, wider = await code_only(
                memoryd, s.prompt, project, (BUDGET, BUDGET + len(edit))
            )
            (m_recall, m_precision), (c_recall, c_precision) = (
                measure(injected, relevant, unique),
                measure(baseline, relevant, unique),
            )
            p_recall = measure(prompt, relevant, unique)[0]
            # The files besides the one edited (which the hook's head names anyway).
            others = relevant - {first}
            e_recall, e_precision = measure(edit, others, unique) if others else (None, None)
            pre_edit = {"pre-edit chars": float(len(edit))}
            if e_recall is not None and e_precision is not None:
                pre_edit |= {"pre-edit recall": e_recall, "pre-edit precision": e_precision}
            # Not the target's measure: with what the pre-edit hook said too (the file it was
            # asked about counts only if the session's first two hooks named it), against the
            # code-only search given as many more characters.
            named_first = float(named(injected, first, unique))
            with_edit = (
                named_first + measure(injected + "\n" + edit, others, unique)[0] * len(others)
                if others
                else named_first
            ) / len(relevant)
            pre_edit |= {
                "memoryd with pre-edit": with_edit,
                "code only, as many chars": measure(wider, relevant, unique)[0],
            }
            rows.append(
                pre_edit
                | {
                    "memoryd": m_recall,
                    "memoryd prompt hook only": p_recall,
                    "code only": c_recall,
                    "nothing": 0.0,
                    "memoryd precision": m_precision,
                    "code only precision": c_precision,
                    "memoryd chars": float(len(injected)),
                }
            )
            print(
                f"  {s.sha[:10]} {len(relevant)} files: recall memoryd {m_recall:.2f} "
                f"(prompt hook {p_recall:.2f}), code only {c_recall:.2f}; precision "
                f"{m_precision:.2f} vs {c_precision:.2f}; {len(injected)} chars "
                f"({time.perf_counter() - started:.0f} s)"
            )
            if show:
                for title, text in (
                    ("briefing", brief),
                    ("prompt hook", prompt),
                    ("code only", baseline),
                ):
                    print(f"    {title}, for the files {sorted(relevant)}:\n{indent(text)}")
                missed = sorted(f for f in relevant if not named(injected, f, unique))
                for line in await misses(
                    memoryd, s.prompt, project, missed, history[start:n], baseline, unique
                ):
                    print(line)
            said = indent(edit)
            scored = (
                f"recall {e_recall:.2f} of {len(others)} other files, precision {e_precision:.2f}"
                if e_recall is not None and e_precision is not None
                else "no other file changed"
            )
            print(f"    pre-edit hook before editing {first} ({scored}):\n{said}")
    finally:
        await rt.close()
    report(label, rows)
    return rows


async def resolution_recall(work: Path, earlier: int) -> dict[str, int]:
    """Sessions 1..k-1: the Claude Code fixture's session `earlier` times over (each a session
    of its own, ingested); session k: the same session once more, its failures given to the
    post-tool hook in order, as Claude Code gives them (PostToolUseFailure's `error`). For each
    failure whose signature an earlier session saw, and that an earlier session resolved
    (RESOLVED_BY), is one of those resolutions in what the hook injected so far in session k
    (the hook says an item once per session: the first time is the one the agent reads)?"""
    place = work / "resolutions"
    shutil.rmtree(place, ignore_errors=True)
    root = place / "claude-code-log"
    text, _, failures = fixture_tree(root)
    fixture_copies(text, place / "transcripts", earlier)
    rt = Runtime(load_settings(data_dir=place / "data"))
    await rt.start_queue(exclusive=True)
    await rt.serve()
    counts = {"failures": len(failures), "seen before": 0, "resolved before": 0, "recalled": 0}
    try:
        assert rt.redis is not None and rt.store is not None
        memoryd = client.Client(rt.redis, rt.settings)
        await index(rt, root)
        await memoryd.ingest([str(p) for p in sorted((place / "transcripts").iterdir())])
        session = f"bench-{uuid.uuid4()}"
        context = ""
        for output in failures:
            key = entity_id(ERROR, canonical_error(output).key)
            if not await rt.store.error_occurrences(key):
                continue
            counts["seen before"] += 1
            payload = {"session_id": session, "cwd": str(root), "tool_name": "Bash"}
            payload["error"] = output
            context += await hook_text(memoryd, "post-tool-use-failure", payload)
            fixes = [plain(r) for r in await rt.store.resolutions_of([key])]
            if fixes:
                counts["resolved before"] += 1
                said = (f"fixed in session {f['session']}" in context for f in fixes)
                counts["recalled"] += any(said)
    finally:
        await rt.close()
    return counts


def report(label: str, rows: list[dict[str, float]]) -> None:
    """The mean of each measure over the sessions that have it (the pre-edit hook's recall
    only where the session changed another file)."""
    if not rows:
        return
    print(f"-- {label}: {len(rows)} sessions")
    for key in dict.fromkeys(k for r in rows for k in r):
        have = [r[key] for r in rows if key in r]
        print(f"  {key:<28} {statistics.fmean(have):.3f}  ({len(have)} sessions)")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("repos", nargs="*", type=Path)
    parser.add_argument("--work", type=Path, help="keep the clones (and the last data dirs) here")
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument(
        "--earlier", type=int, default=2, help="earlier sessions of the failure fixture"
    )
    parser.add_argument("--name", action="append", help="a name to print per repo, in order")
    parser.add_argument(
        "--show", action="store_true", help="print what the hooks and the baseline inject"
    )
    args = parser.parse_args()
    # This machine's own memoryd config and transcripts stay out of the measurement; the hooks
    # get the time they need on a loaded machine (what they say is measured here, how fast
    # they say it by bench/agent_latency.py).
    os.environ |= {
        "MEMORYD_CONFIG": "/nonexistent/memoryd-bench.toml",
        "MEMORYD_TRANSCRIPTS": "[]",
        "MEMORYD_HOOK_TIMEOUT_SECONDS": "30",
    }
    work = args.work or Path(tempfile.mkdtemp(prefix="mdctx-"))
    work.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, float]] = []
    try:
        names = args.name or []
        for i, repo in enumerate(args.repos):
            name = names[i] if i < len(names) else None
            rows += await evaluate(repo, name, args.sessions, work, args.show)
        resolutions = await resolution_recall(work, args.earlier)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    report("all repositories", rows)
    if rows:
        gains = [r["memoryd"] - r["code only"] for r in rows]
        gain = statistics.fmean(gains)
        verdict = "met" if gain >= TARGET else "NOT met"
        print(f"file recall, memoryd minus code only: {gain:+.3f} (target >= {TARGET}: {verdict})")
        # How far the mean could be from the same measure over many more such sessions: one
        # file of a short session moves it by 1/n, and ties say nothing either way.
        error = statistics.stdev(gains) / len(gains) ** 0.5 if len(gains) > 1 else float("nan")
        ties = sum(g == 0 for g in gains)
        print(
            f"  standard error {error:.3f} over {len(gains)} sessions ({ties} ties, "
            f"{sum(g > 0 for g in gains)} ahead, {sum(g < 0 for g in gains)} behind)"
        )
    got = resolutions
    share = got["recalled"] / got["resolved before"] if got["resolved before"] else 0.0
    verdict = "met" if share >= RESOLUTION_TARGET else "NOT met"
    print(
        f"\n== failures replayed (Claude Code fixture, session k after {args.earlier} earlier "
        f"ones): {got['failures']} failures, {got['seen before']} seen before, "
        f"{got['resolved before']} resolved before"
    )
    print(
        f"resolution recall: {share:.3f} ({got['recalled']} of {got['resolved before']}; "
        f"target >= {RESOLUTION_TARGET}: {verdict})"
    )
    print(f"load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    asyncio.run(main())
