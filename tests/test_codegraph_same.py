"""The code graph's extractor gives the same facts as before its walks became tree-sitter
queries: tests/data/codegraph-facts.json holds what the extractor of commit 9e3b2e6 (a walk of
every node in Python) found in the vendored arq (Python) and node-pty (TypeScript) sources, and
what the extractor of commit 3b37ac9 (still that walk for TypeScript, Go and Rust) found in the
vendored cobra (Go) and ripgrep (Rust) files, in order, and the extractor of now must find
exactly that, from its own parse or the one the chunker shares."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from workers.stages.chunking import chunk_text, language_for_path, parse
from workers.stages.codegraph.extract import extract

DATA = Path(__file__).parent / "data"


def test_same_facts_as_the_walking_extractor() -> None:
    expected = json.loads((DATA / "codegraph-facts.json").read_text())
    # every Python and TypeScript file of arq and node-pty, four Go and three Rust files
    assert len(expected) == 25
    assert sum(len(facts["calls"]) for facts in expected.values()) == 799
    languages = {language_for_path(rel) for rel in expected}
    assert languages == {"python", "typescript", "go", "rust"}
    for rel, facts in expected.items():
        text, language = (DATA / rel).read_text(), language_for_path(rel)
        assert language is not None
        parsed = parse(text, language)  # indexing parses once for the chunker and the graph
        for graph in (extract(text, language), extract(text, language, parsed)):
            assert graph is not None, rel
            # JSON makes the tuples lists, as in the stored facts
            assert json.loads(json.dumps(dataclasses.asdict(graph))) == facts, rel
        assert chunk_text(text, language, parsed=parsed) == chunk_text(text, language), rel
