"""What is remembered: `<private>` spans never stored, excluded projects never read."""

from __future__ import annotations

import json
from pathlib import Path

from tests.test_ingest import SMALL, cli
from tests.test_transfer import two_dirs  # noqa: F401  (a fixture)

SECRET = "Zebra-Quokka-7731"


def test_a_private_span_is_stored_nowhere(
    two_dirs: tuple[Path, Path],  # noqa: F811
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
