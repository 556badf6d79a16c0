"""What indexing one file's current content produces: its chunks, each with a deterministic id
and its secrets redacted, and the symbols its named definitions define. Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import blake3
from tree_sitter import Tree

from memoryd.ids import file_entity_id, stable_id, symbol_entity_id, symbol_key
from workers.stages.chunking import chunk_text, language_for_path
from workers.stages.codegraph import GraphRows
from workers.stages.redact import SecretMemory, redact

# Chunk types that are a named definition; `block` is a piece of one (or a group that starts
# with one) in languages where names are definitions, not config keys or headings.
_SYMBOL_TYPES = frozenset({"function", "method", "class"})
_NO_SYMBOL_LANGUAGES = frozenset({"json", "yaml", "toml", "markdown"})


def _symbol_of(chunk_type: str, name: str | None, language: str | None) -> bool:
    if not name or language is None:
        return False
    if chunk_type in _SYMBOL_TYPES:
        return True
    return chunk_type == "block" and language not in _NO_SYMBOL_LANGUAGES


@dataclass(slots=True)
class FilePlan:
    """What indexing one file's current content produces (no vectors yet)."""

    path: str
    chunks: list[dict[str, Any]]
    symbols: list[dict[str, Any]] = field(default_factory=list)
    graph: GraphRows | None = None


def plan_file(
    project_id: str,
    rel_path: str,
    text: str,
    file_hash: str,
    max_chars: int,
    parsed: Tree | None = None,
) -> FilePlan:
    """Chunk a file and give each chunk a deterministic id: project + path + content hash
    (+ occurrence number, so two identical chunks in one file stay two rows). Chunks of a named
    definition also point at its symbol entity.

    The file's secrets are redacted before it is cut, so no chunk, vector or search index ever
    holds one; redaction keeps every line where it was, so line numbers are the file's own. A
    value found once is redacted wherever else it appears in the file. `parsed`: the syntax
    tree of `text` the code graph uses too; redaction that changed the text needs its own."""
    redacted = redact(text, SecretMemory(rel_path))
    if redacted != text:
        text, parsed = redacted, None
    language = language_for_path(rel_path)
    seen: dict[str, int] = {}
    rows = []
    symbols: dict[str, dict[str, Any]] = {}
    entity_id = file_entity_id(project_id, rel_path)
    for chunk in chunk_text(text, language, max_chars=max_chars, parsed=parsed):
        content_hash = blake3.blake3(chunk.content.encode("utf-8", "surrogatepass")).hexdigest()
        occurrence = seen.get(content_hash, 0)
        seen[content_hash] = occurrence + 1
        chunk_id = stable_id(project_id, rel_path, content_hash, str(occurrence))
        row = {
            "id": chunk_id,
            "entity_id": entity_id,
            "path": rel_path,
            "language": language,
            "chunk_type": chunk.chunk_type,
            "name": chunk.name,
            "parent_name": chunk.parent_name,
            "start_line": chunk.start_line,
            "end_line": chunk.end_line,
            "content": chunk.content,
            "content_hash": content_hash,
            "file_hash": file_hash,
        }
        if chunk.name and _symbol_of(chunk.chunk_type, chunk.name, language):
            key = symbol_key(project_id, rel_path, chunk.name, chunk.parent_name)
            symbol_id = symbol_entity_id(key)
            name = f"{chunk.parent_name}.{chunk.name}" if chunk.parent_name else chunk.name
            symbols.setdefault(key, {"entity_id": symbol_id, "key": key, "name": name})
            row["symbol_id"] = symbol_id
            row["symbol_edge_id"] = stable_id("symbol", chunk_id)
        rows.append(row)
    return FilePlan(rel_path, rows, list(symbols.values()))
