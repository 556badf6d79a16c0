"""`memoryd forget`: a real transcript ingested, one session forgotten, and nothing of it left
in the tables, in search, or after its transcript is read again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import cli
from tests.fixtures import S37, SMALL

# Each test here runs a whole scenario through a daemon or the full stack: not the quick loop.
pytestmark = pytest.mark.e2e

SESSION = S37.stem


def _rows_naming(data: Path, text: str) -> dict[str, list[dict]]:
    """Exported rows (every table) that contain `text`, per table."""
    found: dict[str, list[dict]] = {}
    for line in cli("export", "--data-dir", str(data)).stdout.splitlines():
        if text in line:
            row = json.loads(line)
            found.setdefault(row["table"], []).append(row["row"])
    return found


def _assert_forgotten(data: Path, transcript: Path) -> None:
    """Nothing names the session but the note that it was forgotten, and the cursor of its
    transcript by the file's path (its saved parser state holds nothing of it)."""
    found = _rows_naming(data, SESSION)
    assert sorted(found) == ["forgotten_session", "transcript_cursor"]
    assert [r["id"] for r in found["forgotten_session"]] == [SESSION]
    [cursor] = found["transcript_cursor"]
    assert cursor["path"] == str(transcript)
    assert SESSION not in json.dumps({k: v for k, v in cursor.items() if k != "path"})


def test_forget_session_leaves_nothing_and_stays_forgotten(
    two_dirs: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    data = two_dirs[0]
    transcripts = tmp_path / "transcripts"
    transcripts.mkdir()
    mine, other = transcripts / S37.name, transcripts / SMALL.name
    shutil.copy(S37, mine)
    shutil.copy(SMALL, other)
    cli("ingest", str(transcripts), "--data-dir", str(data))
    before = json.loads(cli("status", "--data-dir", str(data), "--json").stdout)["counts"]
    query = ("search", "_get_enhanced_session_navigation", "--kind", "memory", "--json")
    hits = json.loads(cli(*query, "--data-dir", str(data)).stdout)["results"]
    assert any(h["session"] == SESSION for h in hits)
    assert set(_rows_naming(data, SESSION)) >= {"session", "memory", "contains", "reads"}

    args = ("forget", "--session", SESSION[:8], "--data-dir", str(data), "--json")
    dry = json.loads(cli(*args, "--dry-run").stdout)
    assert dry["dry_run"] is True and dry["sessions"] == [SESSION]
    assert dry["removed"]["session"] == 1 and dry["removed"]["memory"] == 282
    unchanged = json.loads(cli("status", "--data-dir", str(data), "--json").stdout)["counts"]
    assert unchanged == before

    done = json.loads(cli(*args).stdout)
    assert done["sessions"] == [SESSION]
    for table in ("session", "memory", "goal"):
        assert done["removed"][table] == dry["removed"][table]
    after = json.loads(cli("status", "--data-dir", str(data), "--json").stdout)["counts"]
    assert before["memory"] - after["memory"] == 282 and before["session"] - after["session"] == 1
    assert before["goal"] - after["goal"] == dry["removed"]["goal"]
    _assert_forgotten(data, mine)
    hits = json.loads(cli(*query, "--data-dir", str(data)).stdout)["results"]
    assert not any(h["session"] == SESSION for h in hits)

    # The transcript replaced by a copy of itself (a new inode): read again from its start.
    shutil.copy(mine, tmp_path / "copy.jsonl")
    (tmp_path / "copy.jsonl").replace(mine)
    report = json.loads(cli("ingest", str(mine), "--data-dir", str(data), "--json").stdout)
    [again] = report["reports"]
    assert again["restarted"] is True and again["lines"] > 0
    assert again["memories"] == 0 and again["sessions"] == 0
    _assert_forgotten(data, mine)
    final = json.loads(cli("status", "--data-dir", str(data), "--json").stdout)["counts"]
    assert final == after
