"""`memoryd forget`: a real transcript ingested, one session forgotten, and nothing of it left
in the tables, in search, or after its transcript is read again."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import zstandard
from arq.constants import result_key_prefix
from arq.jobs import serialize_result

from memoryd.client import Client
from memoryd.daemon.runtime import Runtime
from memoryd.database.export import read_jsonl, write_backup
from memoryd.embedding import Embedder
from memoryd.results import SearchRequest
from memoryd.store import Store
from tests.conftest import MEMORYD, cli, served, status_of
from tests.fixtures import S37, SMALL

# Each test here runs a whole scenario through a daemon or the full stack: not the quick loop.
pytestmark = pytest.mark.e2e

SESSION = S37.stem


def _rows_naming(data: Path, embedder: Embedder, text: str) -> dict[str, list[dict]]:
    """Exported rows (every table) that contain `text`, per table."""
    out = io.BytesIO()

    async def work(memoryd: Client) -> int:
        return await memoryd.export(out)

    served(data, embedder, work)
    found: dict[str, list[dict]] = {}
    for line in out.getvalue().decode().splitlines():
        if text in line:
            row = json.loads(line)
            found.setdefault(row["table"], []).append(row["row"])
    return found


def _assert_forgotten(data: Path, embedder: Embedder, transcript: Path) -> None:
    """Nothing names the session but the note that it was forgotten, and the cursor of its
    transcript by the file's path (its saved parser state holds nothing of it)."""
    found = _rows_naming(data, embedder, SESSION)
    assert sorted(found) == ["forgotten_session", "transcript_cursor"]
    assert [r["id"] for r in found["forgotten_session"]] == [SESSION]
    [cursor] = found["transcript_cursor"]
    assert cursor["path"] == str(transcript)
    assert SESSION not in json.dumps({k: v for k, v in cursor.items() if k != "path"})


def test_forget_session_leaves_nothing_and_stays_forgotten(
    two_dirs: tuple[Path, Path], tmp_path: Path, embedder: Embedder
) -> None:
    data = two_dirs[0]
    transcripts = tmp_path / "transcripts"
    transcripts.mkdir()
    mine, other = transcripts / S37.name, transcripts / SMALL.name
    shutil.copy(S37, mine)
    shutil.copy(SMALL, other)
    cli("ingest", str(transcripts), "--data-dir", str(data))
    before = status_of(data, embedder)["counts"]
    query = ("search", "_get_enhanced_session_navigation", "--kind", "memory", "--json")
    hits = json.loads(cli(*query, "--data-dir", str(data)).stdout)["results"]
    assert any(h["session"] == SESSION for h in hits)
    assert set(_rows_naming(data, embedder, SESSION)) >= {"session", "memory", "reads"}

    args = ("forget", "--session", SESSION[:8], "--data-dir", str(data), "--json")
    dry = json.loads(cli(*args, "--dry-run").stdout)
    assert dry["dry_run"] is True and dry["sessions"] == [SESSION]
    assert dry["removed"]["session"] == 1 and dry["removed"]["memory"] == 282
    unchanged = status_of(data, embedder)["counts"]
    assert unchanged == before

    done = json.loads(cli(*args).stdout)
    assert done["sessions"] == [SESSION]
    for table in ("session", "memory", "goal"):
        assert done["removed"][table] == dry["removed"][table]
    after = status_of(data, embedder)["counts"]
    assert before["memory"] - after["memory"] == 282 and before["session"] - after["session"] == 1
    assert before["goal"] - after["goal"] == dry["removed"]["goal"]
    _assert_forgotten(data, embedder, mine)
    hits = json.loads(cli(*query, "--data-dir", str(data)).stdout)["results"]
    assert not any(h["session"] == SESSION for h in hits)

    # The transcript replaced by a copy of itself (a new inode): read again from its start.
    shutil.copy(mine, tmp_path / "copy.jsonl")
    (tmp_path / "copy.jsonl").replace(mine)
    report = json.loads(cli("ingest", str(mine), "--data-dir", str(data), "--json").stdout)
    [again] = report["reports"]
    assert again["restarted"] is True and again["lines"] > 0
    assert again["memories"] == 0 and again["sessions"] == 0
    _assert_forgotten(data, embedder, mine)
    final = status_of(data, embedder)["counts"]
    assert final == after


MARK = "Ocelot-Marmalade-5519"


def files_holding(data: Path, *needles: str | bytes) -> set[str]:
    """The files under `data` (relative) whose bytes hold one of `needles` (text as UTF-8),
    read raw and, for zstd files, decompressed too."""
    wanted = [n.encode() if isinstance(n, str) else n for n in needles]
    found = set()
    for path in data.rglob("*"):
        if not path.is_file():
            continue
        raw = path.read_bytes()
        if path.suffix == ".zst":
            raw += zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)).read()
        if any(needle in raw for needle in wanted):
            found.add(str(path.relative_to(data)))
    return found


def _holds_close(raw: np.ndarray, half: np.ndarray) -> bool:
    """Whether `raw` holds, at any byte offset, float32 values that round to `half`."""
    target = half.astype(np.float32)
    for offset in range(4):
        shifted = raw[offset:]
        whole = shifted[: len(shifted) // 4 * 4].view(np.float32)
        starts = np.flatnonzero(np.isclose(whole, target[0], atol=1e-3))
        if any(
            np.allclose(whole[i : i + len(target)], target, atol=1e-3)
            for i in starts
            if i + len(target) <= len(whole)
        ):
            return True
    return False


async def _plant(stack: Runtime, tmp_path: Path) -> tuple[Client, str, Path]:
    """SMALL with MARK in its first prompt, ingested, found by search (so the queue holds it
    in a kept result), and copied into a migration backup; the memory's id and the backup."""
    assert stack.redis is not None and stack.store is not None
    data, client = stack.settings.data_dir, Client(stack.redis, stack.settings)
    prompt = "Summarize the findings."
    transcript = tmp_path / SMALL.name
    transcript.write_text(SMALL.read_text().replace(prompt, f"{prompt} The codename is {MARK}."))
    [report] = await client.ingest([str(transcript)])
    assert report["memories"] == 22
    [memory] = [
        h.id
        for h in (await client.search(SearchRequest(MARK, ("memory",)))).hits
        if MARK in (h.text or "")
    ]
    backup = data / "backups" / "before-test.jsonl.zst"
    await write_backup(stack.store, backup)
    held = files_holding(data, MARK)
    assert {"redis/appendonly.aof", "backups/before-test.jsonl.zst"} <= held
    assert any(name.startswith("search/lexical/") for name in held)
    return client, memory, backup


async def test_a_forgotten_memory_leaves_no_byte_in_the_data_dir(
    stack: Runtime, tmp_path: Path
) -> None:
    """A prompt carrying a unique text, ingested with its session, found by search, copied into
    a migration backup; forgotten by id. Then no file of the data dir but the database's own
    holds it: not the search indexes (its segment is written again), not the queue's kept
    results or append-only file, not the backup. After `memoryd compact`, no file at all."""
    client, memory, backup = await _plant(stack, tmp_path)
    data, before = stack.settings.data_dir, list(read_jsonl(backup))
    assert stack.store is not None
    [row] = [r for r in await stack.store.rows_after("memory", None, 100) if r["id"] == memory]
    # Its vector as the database stores it (packed half floats) and the search index's
    # journal (the model's float32 values, the same vector before packing) hold it.
    vector = [row["embedding"], np.frombuffer(row["embedding"], np.float16)]
    assert {name.split("/")[0] for name in files_holding(data, vector[0])} == {"db"}
    journal = np.frombuffer((data / "search" / "vectors-memory.journal").read_bytes(), np.uint8)
    assert _holds_close(journal, vector[1])

    done = await client.forget([memory])
    assert done["removed"] == {"memory": 1, "goal": 1}
    # (Not a search for MARK: its query would be a job argument the queue logs.)
    found = (
        await client.search(SearchRequest("Summarize the findings codename", ("memory",)))
    ).hits
    assert found and memory not in {h.id for h in found}
    assert {name.split("/")[0] for name in files_holding(data, MARK)} == {"db"}
    assert {name.split("/")[0] for name in files_holding(data, vector[0])} == {"db"}
    journal = np.frombuffer((data / "search" / "vectors-memory.journal").read_bytes(), np.uint8)
    assert not _holds_close(journal, vector[1])
    # The backup lost the memory, the goal drawn from it and their edges, nothing else.
    ref = f"memory:{memory}"
    [goal] = [f"goal:{r['row']['id']}" for r in before if r["row"].get("memory") == ref]
    doomed = {ref, goal}
    expected = [
        r for r in before
        if f"{r['table']}:{r['row']['id']}" not in doomed
        and r["row"].get("in") not in doomed and r["row"].get("out") not in doomed
    ]  # fmt: skip
    # The memory (a prompt: no edge of its own), its goal and the goal's HAS_GOAL edge.
    assert len(before) - len(expected) == 3 and list(read_jsonl(backup)) == expected

    # The database's own files keep it (the engine's value log): `memoryd compact`, with the
    # daemon stopped, writes the live rows into a new database and drops the old files.
    await stack.store.settled()  # the searches' access counts are written after their answers
    graph = await stack.store.dump()
    refused = subprocess.run(
        [MEMORYD, "compact", "--data-dir", str(data)], capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 1 and "stop it, then compact" in refused.stderr
    await stack.close()
    assert {name.split("/")[0] for name in files_holding(data, MARK)} == {"db"}
    compacted = json.loads(cli("compact", "--data-dir", str(data), "--json").stdout)
    assert compacted["rows"] == {t: len(rows) for t, rows in graph.items() if rows}
    assert files_holding(data, MARK, vector[0]) == set()
    assert sorted(p.name for p in data.iterdir() if p.name.startswith("db")) == ["db"]
    store = await Store.open(stack.settings.database_url, "memoryd", "memory")
    try:
        assert await store.dump() == graph
    finally:
        await store.close()


async def test_a_forgotten_memory_stays_forgotten_when_its_transcript_is_read_again(
    stack: Runtime, tmp_path: Path
) -> None:
    """Forgotten by id, then its transcript replaced by a copy (a new file: read from its
    start): the memory, the goal drawn from it and their edges do not come back; the rest of
    the session does, unchanged."""
    client, memory, _ = await _plant(stack, tmp_path)
    assert stack.store is not None
    [goal] = [
        str(g["id"].id) for g in (await stack.store.dump())["goal"] if str(g["memory"].id) == memory
    ]
    await client.forget([memory])
    after_forget = await stack.store.dump()
    remembered = sorted(str(r["id"].id) for r in after_forget["forgotten_record"])
    assert remembered == [f"goal:{goal}", f"memory:{memory}"]
    transcript = tmp_path / SMALL.name
    copy = transcript.with_suffix(".copy")
    copy.write_bytes(transcript.read_bytes())
    copy.replace(transcript)  # a new file (inode) at the path: it is read from byte 0
    [report] = await client.ingest([str(transcript)])
    assert report["memories"] == 21  # every memory of the file but the forgotten one
    again = await stack.store.dump()
    bookkeeping = {"transcript_cursor", "search_state"}  # where it read to, a write count
    assert {t: rows for t, rows in again.items() if t not in bookkeeping} == {
        t: rows for t, rows in after_forget.items() if t not in bookkeeping
    }


async def test_a_forgotten_session_leaves_no_byte_outside_the_database(
    stack: Runtime, tmp_path: Path
) -> None:
    """The same through `forget --session`: the queue, the search indexes and the backup lose
    the whole session. The results another application keeps on the same Redis stay."""
    client, _memory, backup = await _plant(stack, tmp_path)
    assert stack.redis is not None
    kept = {r.job_id for r in await stack.redis.all_job_results()}
    assert kept  # the ingest's and the search's
    other = ("send_mail", ("to",), {}, 1, 0, True, "sent", 0, 1, "r", "mailer:queue", "mail-1")
    await stack.redis.set(result_key_prefix + "mail-1", serialize_result(*other))
    done = await client.forget_scope("session", SMALL.stem)
    left = {r.job_id for r in await stack.redis.all_job_results()}
    assert "mail-1" in left and not left & kept
    assert done["sessions"] == [SMALL.stem] and done["removed"]["memory"] == 22
    assert {name.split("/")[0] for name in files_holding(stack.settings.data_dir, MARK)} == {"db"}
    session = f"session:{SMALL.stem}"
    left = [
        r for r in read_jsonl(backup) if session in (r["row"].get("session"), r["row"].get("in"))
    ]
    assert left == [] and not [r for r in read_jsonl(backup) if r["table"] in ("memory", "goal")]
