"""The rows the ingest job writes for a whole transcript, from the pure stages alone: what the
benchmarks replay and compare against (the job reads a file in batches, but the parser's state
carries over, so the rows are the same)."""

from __future__ import annotations

from pathlib import Path

from workers.ingest import HEAD_BYTES, Rows, _subagent_meta, rows_for
from workers.stages.transcripts import Source, detect_agent, parser_for, split_lines


def whole_file_rows(path: str) -> tuple[str, bytes, Rows] | None:
    """(agent, the file's bytes, its rows), or None for a file in no format memoryd knows."""
    data = Path(path).read_bytes()
    agent = detect_agent(data[:HEAD_BYTES], path)
    if agent is None:
        return None
    lines, _ = split_lines(data, 0)
    meta = _subagent_meta(path) if agent == "claude-code" else None
    result = parser_for(agent).parse(lines, None, Source.of(path, [], meta))
    return agent, data, rows_for(result, path)
