"""k-NN filters run after the HNSW scan: rows the filters drop must not crowd out the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from memoryd.daemon.runtime import Runtime
from memoryd.searchindex import keywords
from tests.conftest import git_init, index_tree, queued_search

# No word of the query is in the code: only the k-NN can find it.
QUERY = "reimburse a customer for a purchase"
RETIRED = 120  # more than the k-NN's first k (limit 5 -> 20 candidates x 4)


def _refund(name: str) -> str:
    return f"def {name}(order):\n    return order.refund_payment()\n"


@pytest.mark.e2e
async def test_valid_row_found_behind_many_retired_neighbours(
    stack: Runtime, tmp_path: Path
) -> None:
    root = tmp_path / "shop"
    root.mkdir()
    for i in range(RETIRED):
        (root / f"old_{i:03}.py").write_text(_refund(f"refund_order_{i:03}"))
    (root / "current.py").write_text(_refund("refund_order_now"))
    git_init(root)
    await index_tree(stack, root)
    assert stack.redis is not None
    before = await queued_search(stack.redis, QUERY, 5)
    assert len(before) == 5

    for i in range(RETIRED):
        (root / f"old_{i:03}.py").unlink()
    await index_tree(stack, root)
    # The retired chunks are the query's nearest vectors too; the one valid chunk is found.
    hits = await queued_search(stack.redis, QUERY, 5)
    assert [(h["path"], h["name"]) for h in hits] == [("current.py", "refund_order_now")]


def test_keywords_drop_function_words_unless_nothing_is_left() -> None:
    assert keywords("How do we retry the Redis connection when it is lost?") == (
        "retry Redis connection lost?"
    )
    assert keywords("what is it") == "what is it"
    assert keywords("parse_config(path)") == "parse_config(path)"
