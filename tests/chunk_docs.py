"""Search-index documents chunked from a real file as the indexer chunks it (the test of the
search index and its bench both build their rows this way)."""

from __future__ import annotations

from collections.abc import Iterator

from memoryd.searchindex import Doc, chunk_kind
from workers.stages.chunking import chunk_text, language_for_path


def chunk_docs(project: str, rel: str, text: str, version: str, valid_from: int) -> Iterator[Doc]:
    """The chunks of `text`, a file at `rel` in `project`; ids are `project:rel:n` plus
    `version`."""
    language = language_for_path(rel)
    for n, chunk in enumerate(chunk_text(text, language)):
        yield Doc(
            table="code_chunk",
            id=f"{project}:{rel}:{n}{version}",
            kind=chunk_kind(rel, language),
            content=chunk.content,
            project=project,
            path=rel,
            language=language,
            name=chunk.name,
            parent_name=chunk.parent_name,
            valid_from=valid_from,
            fields={"start_line": chunk.start_line, "end_line": chunk.end_line},
        )
