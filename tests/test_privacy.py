"""What is remembered: `<private>` spans never stored, excluded projects never read."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from memoryd.daemon.runtime import Runtime
from memoryd.embedding import Embedder
from memoryd.store import QueryFailed
from tests.conftest import MEMORYD, Lines, cli, env_without, git_init, status_of, wait_daemon
from tests.fixtures import RENDERER, S37, SMALL

# Each test here runs a whole scenario through a daemon or the full stack: not the quick loop.
pytestmark = pytest.mark.e2e

SECRET = "Zebra-Quokka-7731"


def test_a_private_span_is_stored_nowhere(
    two_dirs: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    data = two_dirs[0]
    prompt = "Summarize the findings."
    text = SMALL.read_text()
    assert text.count(prompt) == 1
    transcript = tmp_path / SMALL.name
    transcript.write_text(
        text.replace(prompt, f"{prompt} <private>my bank pin is {SECRET}</private> Thanks.")
    )
    cli("ingest", str(transcript), "--data-dir", str(data))

    exported = cli("export", "--data-dir", str(data)).stdout
    rows = [json.loads(line) for line in exported.splitlines()]
    assert not any(SECRET in json.dumps(row) for row in rows)
    memories = [r["row"] for r in rows if r["table"] == "memory"]
    [stored] = [m["content"] for m in memories if prompt in m["content"]]
    assert stored.endswith(f"{prompt} [PRIVATE] Thanks.")
    [goal] = [r["row"]["intent"] for r in rows if r["table"] == "goal"]
    assert "[PRIVATE]" in goal and "bank pin" not in goal
    # Not in any file of the data dir either: database, queue, logs.
    files = [p for p in data.rglob("*") if p.is_file()]
    # The stored prompt is readable in those bytes, so the check below can see text.
    assert any(b"[PRIVATE] Thanks." in path.read_bytes() for path in files)
    for path in files:
        assert SECRET.encode() not in path.read_bytes(), path


def memoryd(config: Path, *args: str, transcripts: str = "[]") -> subprocess.CompletedProcess[str]:
    env = env_without() | {"MEMORYD_CONFIG": str(config), "MEMORYD_TRANSCRIPTS": transcripts}
    return subprocess.run([MEMORYD, *args], capture_output=True, text=True, timeout=600, env=env)


def test_excluded_repos_paths_and_sessions_never_reach_the_database(
    two_dirs: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    data = two_dirs[0]
    hidden, shown = tmp_path / "hidden", tmp_path / "shown"
    (shown / "vault").mkdir(parents=True)
    hidden.mkdir()
    (hidden / "c.py").write_text("def hidden_function_qq7():\n    return 1\n")
    (shown / "a.py").write_text("def visible_function():\n    return 2\n")
    (shown / "vault" / "b.py").write_text("def vaulted_function_zx9():\n    return 3\n")
    for repo in (hidden, shown):
        git_init(repo)
    # The transcript's session ran in /src/experiments/claude_p.
    exclude = [str(hidden), str(shown / "vault"), "/src/experiments/*"]
    config = tmp_path / "memoryd.toml"
    config.write_text(f"exclude = {json.dumps(exclude)}\nagents = {{ codex = false }}\n")

    refused = memoryd(config, "index", str(hidden), "--data-dir", str(data))
    assert refused.returncode == 1 and "excluded by the config" in refused.stderr
    done = memoryd(config, "index", str(shown), "--data-dir", str(data), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["indexed"] == 1
    done = memoryd(config, "ingest", str(SMALL), "--data-dir", str(data), "--json")
    [report] = json.loads(done.stdout)["reports"]
    assert report["lines"] > 0 and report["memories"] == 0 and report["sessions"] == 0

    status = json.loads(memoryd(config, "status", "--data-dir", str(data), "--json").stdout)
    assert status["remembered"]["exclude"] == exclude
    assert status["remembered"]["agents"] == {"claude-code": True, "codex": False, "gemini": True}
    assert status["counts"]["session"] == 0 and status["counts"]["memory"] == 0
    assert status["counts"]["file_state"] == 1 and status["counts"]["project"] == 1
    exported = memoryd(config, "export", "--data-dir", str(data)).stdout
    assert "visible_function" in exported
    for word in ("hidden_function_qq7", "vaulted_function_zx9", "vault/b.py", "Haiku model"):
        assert word not in exported
        for path in (p for p in data.rglob("*") if p.is_file()):
            assert word.encode() not in path.read_bytes(), (word, path)


def test_paused_capture_ingests_nothing_and_catches_up_only_if_told(
    two_dirs: tuple[Path, Path], tmp_path: Path, embedder: Embedder
) -> None:
    data, folder = two_dirs[0], tmp_path / "transcripts"
    folder.mkdir()
    config = tmp_path / "none.toml"

    def run(*args: str) -> dict:
        done = memoryd(
            config, *args, "--data-dir", str(data), transcripts=json.dumps([str(folder)])
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout) if "--json" in args else {"out": done.stdout}

    def counts() -> dict[str, int]:
        # Read in this process: the test is about the pause and resume commands.
        return status_of(data, embedder)["counts"]

    assert "capture paused for 2h" in run("pause", "--for", "2h")["out"]
    assert run("status", "--json")["paused_since"] is not None
    skipped, caught = folder / S37.name, folder / SMALL.name
    shutil.copy(S37, skipped)
    [report] = run("ingest", str(skipped), "--json")["reports"]
    assert report["memories"] == 0 and report["note"].startswith("capture is paused")
    assert counts()["memory"] == 0

    resumed = run("resume", "--json")
    assert resumed["caught_up"] == 0 and resumed["skipped"] == 1
    assert run("status", "--json")["paused_since"] is None
    [report] = run("ingest", str(skipped), "--json")["reports"]
    assert report["memories"] == 0 and report["note"] == "up to date"
    now = counts()
    assert now["memory"] == 0 and now["session"] == 0

    run("pause")
    shutil.copy(SMALL, caught)
    resumed = run("resume", "--catch-up", "--json")
    assert resumed["caught_up"] == 1 and resumed["skipped"] == 0
    after = counts()
    assert after["session"] == 1 and after["memory"] > 0
    [report] = run("ingest", str(caught), "--json")["reports"]
    assert report["memories"] == 0 and report["note"] == "up to date"


def test_actions_on_excluded_files_keep_their_verb_not_their_content(
    two_dirs: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    data = two_dirs[0]
    config = tmp_path / "memoryd.toml"
    config.write_text(f"exclude = {json.dumps([RENDERER])}\n")
    assert memoryd(config, "ingest", str(S37), "--data-dir", str(data)).returncode == 0
    history = json.loads(
        memoryd(config, "history", RENDERER, "--data-dir", str(data), "--json").stdout
    )
    [session] = history["sessions"]
    verbs = [a["verb"] for a in session["actions"]]
    assert verbs.count("READS") == 10 and verbs.count("MODIFIES") == 6

    exported = memoryd(config, "export", "--data-dir", str(data)).stdout
    rows = [json.loads(line) for line in exported.splitlines()]
    [renderer] = [r["row"]["id"] for r in rows if r["row"].get("key") == RENDERER]
    target = f"entity:{renderer}"
    callers = {
        r["row"]["in"]
        for r in rows
        if r["table"] in ("reads", "modifies", "denied", "mentions") and r["row"]["out"] == target
    }
    memories = {f"memory:{r['row']['id']}": r["row"] for r in rows if r["table"] == "memory"}
    assert len(callers) >= 14
    call_ids = {memories[c].get("call_id") for c in callers}
    assert None not in call_ids
    results = [
        m for m in memories.values() if m.get("call_id") in call_ids and m["kind"] != "tool_call"
    ]
    assert len(results) >= 14
    for memory in [memories[c] for c in callers] + results:
        assert memory["content"] == "[excluded]"
    edges = [r["row"] for r in rows if r["table"] == "modifies" and r["row"]["out"] == target]
    assert edges and all(e["detail"] == "" for e in edges)
    kept = sum(m["content"] != "[excluded]" for m in memories.values())
    assert kept == 282 - len(callers) - len(results)


def test_search_leaves_out_what_was_stored_before_it_was_excluded(
    two_dirs: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    data, repo = two_dirs[0], tmp_path / "repo"
    (repo / "vault").mkdir(parents=True)
    (repo / "open.py").write_text("def parse_invoice_total(lines):\n    return sum(lines)\n")
    (repo / "vault" / "hidden.py").write_text("def parse_invoice_tax(lines):\n    return 0\n")
    git_init(repo)
    before, after = tmp_path / "before.toml", tmp_path / "after.toml"
    before.write_text("")
    after.write_text(f"exclude = {json.dumps([str(repo / 'vault'), '/src/experiments/*'])}\n")
    assert memoryd(before, "index", str(repo), "--data-dir", str(data)).returncode == 0
    assert memoryd(before, "ingest", str(SMALL), "--data-dir", str(data)).returncode == 0

    def found(config: Path, kind: str, query: str) -> list[dict]:
        done = memoryd(config, "search", query, "--kind", kind, "--data-dir", str(data), "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["results"]

    code = ("code", "parse invoice")
    assert {r["path"] for r in found(before, *code)} == {"open.py", "vault/hidden.py"}
    assert {r["path"] for r in found(after, *code)} == {"open.py"}
    memory = ("memory", "WebSearch Task tool Haiku")
    assert found(before, *memory) and found(after, *memory) == []


LOGGED = "Pangolin-Saffron-2046"  # in a prompt of the transcript
ASKED = "Heron-Cardamom-7315"  # in a prompt the agent hook sees


def test_the_daemon_log_holds_no_prompt(two_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    """A daemon follows a transcript with a unique text in a prompt, finds it by search,
    exports it, hands the agent hook a prompt with another, and forgets the session: its log
    (what journald or launchd keeps, which a forget cannot reach) says what happened by paths,
    ids and counts, never with those texts."""
    data, folder = two_dirs[0], tmp_path / "transcripts"
    folder.mkdir()
    prompt = "Summarize the findings."
    (folder / SMALL.name).write_text(
        SMALL.read_text().replace(prompt, f"{prompt} The codename is {LOGGED}.")
    )
    repo = tmp_path / "repo"  # the hook answers in a watched repository only
    repo.mkdir()
    # Three lines: the prompt hook offers no chunk too small to say anything.
    (repo / "spices.py").write_text(
        "def cardamom_heron_blend(grams):\n    ratio = 2\n    return grams * ratio\n"
    )
    git_init(repo)
    config, log_file = tmp_path / "none.toml", tmp_path / "daemon.log"
    env = env_without() | {
        "MEMORYD_CONFIG": str(config),
        "MEMORYD_TRANSCRIPTS": json.dumps([str(folder)]),
    }
    with log_file.open("w") as log:
        daemon = subprocess.Popen(
            [MEMORYD, "run", "--data-dir", str(data), "--repo", str(repo), "--log-format", "json"],
            stderr=log,
            env=env,
        )
    try:
        wait_daemon(
            data, lambda info: info["counts"]["memory"] == 22 and info["counts"]["code_chunk"]
        )
        found = cli("search", LOGGED, "--kind", "memory", "--data-dir", str(data), "--json")
        assert any(LOGGED in (hit["text"] or "") for hit in json.loads(found.stdout)["results"])
        # Through the daemon, which holds the embedded database.
        assert LOGGED in cli("export", "--data-dir", str(data)).stdout
        ask = f"How is the cardamom heron blend made? {ASKED}"
        event = {"session_id": "s1", "prompt": ask, "cwd": str(repo)}
        hook = subprocess.run(
            [MEMORYD, "hook", "claude-code", "user-prompt-submit", "--data-dir", str(data)],
            input=json.dumps(event),
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert "spices.py:1-3 cardamom_heron_blend" in hook.stdout  # the prompt was searched
        forgot = cli("forget", "--session", SMALL.stem, "--data-dir", str(data), "--json")
        assert json.loads(forgot.stdout)["removed"]["memory"] == 22
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=120)
    lines = [json.loads(line) for line in log_file.read_text().splitlines()]
    said = [line["message"] for line in lines]
    assert any(f"{SMALL.name} (claude-code): 24 lines, 22 memories" in m for m in said), said
    assert said[-1] == "memoryd stopped"
    assert LOGGED not in log_file.read_text() and ASKED not in log_file.read_text()


async def test_a_refused_value_is_masked_in_the_engine_message(stack: Runtime) -> None:
    """The engine quotes the values it refuses; memoryd's error (logged, kept in a job's
    result, shown) keeps the names of the index, field and record, never the value."""
    assert stack.store is not None
    store = stack.store
    await store.upsert_project("first", {"root": f"/src/{SECRET}", "name": "a"})
    refusals = {
        "index": {"root": f"/src/{SECRET}", "name": "b"},  # the unique index on root
        "type": {"root": {"path": f"it's {SECRET}"}, "name": "c"},  # not a string
    }
    said = {}
    for what, fields in refusals.items():
        with pytest.raises(QueryFailed) as refused:
            await store.upsert_project(what, fields)
        said[what] = str(refused.value)
    assert said["index"] == (
        "Database index `project_root` already contains '…', with record `project:first`"
    )
    assert said["type"].startswith("Couldn't coerce value for field `root` of `project:type`")
    assert SECRET not in said["type"] and "path" in said["type"]


def test_a_running_daemon_keeps_excluded_files_out_and_captures_nothing_while_paused(
    two_dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    """The watchers, not only the commands: a file written into an excluded folder of a watched
    repository while the daemon runs reaches no file of the data dir, and while capture is
    paused neither a new transcript nor a new source file is taken in, until `resume
    --catch-up` reads the transcript."""
    data, folder, repo = two_dirs[0], tmp_path / "transcripts", tmp_path / "repo"
    folder.mkdir()
    (repo / "vault").mkdir(parents=True)
    (repo / "a.py").write_text("def visible_function():\n    return 2\n")
    (repo / "vault" / "b.py").write_text("def vaulted_function_zx9():\n    return 3\n")
    git_init(repo)
    config = tmp_path / "memoryd.toml"
    config.write_text(f"exclude = {json.dumps([str(repo / 'vault')])}\n")
    env = env_without() | {
        "MEMORYD_CONFIG": str(config),
        "MEMORYD_TRANSCRIPTS": json.dumps([str(folder)]),
    }
    args = ("--data-dir", str(data))
    daemon = subprocess.Popen(
        [MEMORYD, "run", *args, "--repo", str(repo)],
        stderr=subprocess.PIPE,
        text=True,
        env=env | {"MEMORYD_LOG_FORMAT": "human"},
    )
    lines = Lines(daemon)
    try:
        wait_daemon(data, lambda info: info["counts"]["file_state"] == 1)
        (repo / "vault" / "live.py").write_text("def vault_live_qq1():\n    return 4\n")
        (repo / "late.py").write_text("def late_visible_fn():\n    return 5\n")
        wait_daemon(data, lambda info: info["counts"]["file_state"] == 2)

        memoryd(config, "pause", *args)
        shutil.copy(SMALL, folder / SMALL.name)
        (repo / "paused.py").write_text("def paused_fn_kk4():\n    return 6\n")
        # Both changes were seen and left alone: absence by the watchers' word, not a wait.
        lines.wait_for(r"capture is paused \(since .*\): 1 transcripts left alone")
        lines.wait_for(r"capture is paused \(since .*\): 1 files of repo-\w+ left alone")
        paused = json.loads(memoryd(config, "status", *args, "--json").stdout)["counts"]
        assert (paused["file_state"], paused["memory"], paused["session"]) == (2, 0, 0)
        # The shell names no transcript folder: the daemon looks in its own.
        caught = memoryd(config, "resume", "--catch-up", *args, "--json")
        resumed = json.loads(caught.stdout)
        assert resumed["caught_up"] == 1
        after = wait_daemon(data, lambda info: info["counts"]["memory"] == 22)
        assert after["counts"]["file_state"] == 2  # a file written while paused waits its change
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=120)
    holding = [
        str(p.relative_to(data))
        for p in data.rglob("*")
        if p.is_file() and any(w in p.read_bytes() for w in (b"vault_live_qq1", b"zx9"))
    ]
    assert holding == []
    assert any(b"late_visible_fn" in p.read_bytes() for p in data.rglob("*") if p.is_file())
