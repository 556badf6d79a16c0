"""The one declaration of the graph's vocabulary, held against the schema and the write paths."""

from __future__ import annotations

import re
from pathlib import Path

from memoryd import vocabulary
from memoryd.config import Settings
from memoryd.ids import entity_id, file_entity_id, split_file_key
from memoryd.store import SCHEMA_DIR
from workers.stages.entities import canonical_file
from workers.stages.transcripts import events

_RELATION = re.compile(
    r"DEFINE TABLE IF NOT EXISTS (\w+) TYPE RELATION IN (\w+) OUT (\w+)", re.IGNORECASE
)


def _schema_relations() -> dict[str, tuple[str, str]]:
    text = "\n".join(path.read_text() for path in sorted(Path(SCHEMA_DIR).glob("*.surql")))
    return {name: (source, target) for name, source, target in _RELATION.findall(text)}


def test_every_relation_table_of_the_schema_is_a_declared_edge_and_back() -> None:
    declared = {edge.table: (edge.source, edge.target) for edge in vocabulary.EDGES}
    assert _schema_relations() == declared


def test_parsers_and_views_use_the_declared_verbs() -> None:
    assert (events.READS, events.MODIFIES, events.EXECUTES) == vocabulary.ACTION_VERBS
    assert vocabulary.HISTORY_EDGE_TABLES == ("reads", "modifies", "denied", "mentions")
    assert "has_goal" not in vocabulary.REPLAY_EDGE_TABLES
    assert "defined_in" not in vocabulary.TRANSCRIPT_EDGE_TABLES


def test_memory_kinds_give_the_decay_defaults() -> None:
    half_lives = Settings().half_life_days
    assert half_lives == {kind.name: kind.half_life_days for kind in vocabulary.MEMORY_KINDS}
    assert half_lives["tool_result"] == 7.0
    assert "tool_result" not in vocabulary.EMBEDDED_MEMORY_KINDS
    assert vocabulary.AGENT_MEMORY_KINDS == ("decision", "note", "todo")


def test_a_file_an_agent_touched_is_the_entity_the_indexer_wrote() -> None:
    """The join between transcripts and code: one key, one entity id, from either side."""
    touched = canonical_file("src/auth.py", "/home/u/api", [("p1", "/home/u/api")])
    assert touched is not None
    assert touched.key == "p1:src/auth.py"
    assert split_file_key(touched.key) == ("p1", "src/auth.py")
    assert entity_id(touched.kind, touched.key) == file_entity_id("p1", "src/auth.py")
