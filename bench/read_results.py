"""What keeping Read results as references could buy: the bytes memoryd stores for tool outputs,
by tool, on the real fixture transcripts.

    .venv/bin/python -m bench.read_results

Each fixture is parsed by the real parsers into the rows the ingest job writes
(bench/fixture_rows.py), and each memory is cut the way the store cuts it
(`memoryd.store.blobs.split_body`: a head in the row, the whole text zstd-compressed in a blob
named by its hash, one blob per distinct text). Printed per tool: the tool outputs' text, and
what the store keeps of it (heads plus distinct blobs), against the transcript bytes. A Read
result kept as a reference would save at most its tool's stored bytes: the head stays, as a
replay shows it.
Numbers only: the database of the same fixtures is measured by `bench.transcripts` (a).
"""

from __future__ import annotations

from collections import Counter

from bench.fixture_rows import whole_file_rows
from memoryd.store.blobs import split_body
from memoryd.watch.transcripts import transcript_files
from tests.fixtures import CLAUDE, CODEX

KIB = 1024


def main() -> None:
    transcript_bytes = 0
    text: Counter[str] = Counter()
    stored: Counter[str] = Counter()
    blobs: set[str] = set()
    for path in transcript_files([CLAUDE, CODEX]):
        found = whole_file_rows(path)
        if found is None:
            continue
        _, data, rows = found
        transcript_bytes += len(data)
        memories = rows.tables.get("memories", [])
        tools = {m.get("call_id"): m.get("tool") for m in memories if m["kind"] == "tool_call"}
        for memory in memories:
            if memory["kind"] != "tool_result":
                continue
            tool = str(tools.get(memory.get("call_id")) or memory.get("tool") or "?")
            row, blob = split_body(memory)
            text[tool] += len(memory["content"].encode())
            stored[tool] += len(row["content"].encode())
            if blob is not None and str(blob["id"]) not in blobs:
                blobs.add(str(blob["id"]))
                stored[tool] += len(blob["data"])
    total = sum(stored.values())
    print(f"fixtures: {transcript_bytes / KIB:.0f} KiB of transcripts")
    print(
        f"tool outputs: {sum(text.values()) / KIB:.0f} KiB of text, stored as {total / KIB:.0f} KiB"
    )
    for tool, size in stored.most_common(8):
        print(
            f"  {tool:<14} text {text[tool] / KIB:6.1f} KiB  stored {size / KIB:6.1f} KiB  "
            f"({100 * size / total:4.1f}% of tool outputs stored, "
            f"{100 * size / transcript_bytes:.2f}% of the transcript bytes)"
        )


if __name__ == "__main__":
    main()
