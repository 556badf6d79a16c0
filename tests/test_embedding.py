"""The embedder shared by concurrent jobs: one inference at a time, same vectors as alone."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from memoryd.config import DEFAULT_MODEL
from memoryd.embedding import Embedder
from tests.conftest import site_package


def test_concurrent_jobs_take_turns_at_the_model_and_get_the_same_vectors(
    tmp_path: Path,
) -> None:
    """Two index jobs and a search embed at once (arq runs jobs side by side): the model is never
    entered twice at the same moment (each inference already uses every core), nobody waits
    for a whole job's texts (turns are per model batch), and every vector is what one caller
    alone gets."""
    embedder = Embedder(DEFAULT_MODEL, tmp_path / "models", batch_size=2)
    model = embedder._model
    inside = most = calls = 0
    guard = threading.Lock()
    real_embed = model.embed

    def counted(texts: list[str], **kwargs: Any) -> Any:
        nonlocal inside, most, calls
        with guard:
            inside += 1
            calls += 1
            most = max(most, inside)
        try:
            return list(real_embed(texts, **kwargs))
        finally:
            with guard:
                inside -= 1

    model.embed = counted  # type: ignore[method-assign]
    source = (site_package("arq") / "connections.py").read_text().splitlines()
    texts = [line for line in source if line.strip()][:60]
    jobs = [texts[:30], texts[30:], ["how are redis settings parsed from a dsn"]]
    alone = [embedder.embed(job) for job in jobs]
    calls = 0
    with ThreadPoolExecutor(3) as pool:
        together = list(pool.map(embedder.embed, jobs))
    assert most == 1
    assert calls == 15 + 15 + 1  # batches of 2: each a turn of its own
    for mine, theirs in zip(together, alone, strict=True):
        assert np.allclose(mine, theirs, atol=1e-6)
