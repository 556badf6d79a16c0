"""The embedder shared by concurrent jobs: one inference at a time, same vectors as alone."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memoryd.config import DEFAULT_MODEL
from memoryd.embedding import Embedder, batch_nice, embed_off_loop
from memoryd.errors import MemorydError
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


def _threads() -> dict[int, int]:
    """This process's threads: native id -> niceness (field 19 of /proc's stat)."""
    nice = {}
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            nice[int(task.name)] = int(fields[16])
    return nice


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own niceness is Linux's")
def test_batch_embedding_runs_below_the_queries_priority(tmp_path: Path) -> None:
    """An agent's query must not queue behind an index's embedding for the cores: the batch
    session's threads (and the thread that runs its batches) are niced, the caller's not."""
    before = _threads()
    # The suite may itself run niced: batch threads are nicer than the caller, whatever it is.
    caller = before[threading.get_native_id()]
    niced_to = batch_nice(caller)
    assert niced_to == min(19, caller + 10)
    embedder = Embedder(DEFAULT_MODEL, tmp_path / "models", embed_cores=2)
    embedder.embed(["def connect(settings): return Redis(settings.host)"] * 40)
    # A query runs the same session on the caller's thread, and leaves its niceness alone.
    embedder.embed_query("how are redis settings parsed")
    ran: list[int] = []
    embedder._model.embed = lambda texts, **_: ran.append(threading.get_native_id()) or []  # type: ignore[method-assign]
    embedder.embed(["one more batch"])
    after = _threads()
    # The batch thread and the batch session's pool of workers (one per core beyond the first);
    # other threads of the process (earlier tests' loops) may have started meanwhile.
    niced = [tid for tid, nice in after.items() if tid not in before and nice == niced_to]
    assert len(niced) >= 2
    assert ran and after[ran[0]] == niced_to
    assert after[threading.get_native_id()] == caller


async def test_a_cancelled_jobs_embedding_ends_at_its_next_model_batch(tmp_path: Path) -> None:
    """A job cancelled under its embedding (a stop, a Redis restart) leaves no thread embedding
    the rest of its texts: the model runs the batch under way and no other."""
    embedder = Embedder(DEFAULT_MODEL, tmp_path / "models", batch_size=1)
    model = embedder._model
    real_embed = model.embed
    started, release = threading.Event(), threading.Event()
    calls = 0

    def held(texts: list[str], **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        started.set()
        release.wait(60)
        return list(real_embed(texts, **kwargs))

    model.embed = held  # type: ignore[method-assign]
    job = asyncio.create_task(embed_off_loop(embedder, ["def connect(): return Redis()"] * 50))
    assert await asyncio.to_thread(started.wait, 60)
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    release.set()
    # Every thread the loop started has ended: the cancelled embedding among them.
    await asyncio.get_running_loop().shutdown_default_executor()
    assert calls == 1


def test_a_query_is_answered_while_a_batch_runs_on_the_same_session(tmp_path: Path) -> None:
    """An agent's query does not wait for the batch thread (an index's embedding may hold it
    for minutes), and the one session gives it the vector it gives when idle."""
    embedder = Embedder(DEFAULT_MODEL, tmp_path / "models")
    idle = embedder.embed_query("how are redis settings parsed")
    embedder._recent.clear()  # the query's vector must be computed again, not recalled
    inside, release = threading.Event(), threading.Event()
    real_embed = embedder._model.embed

    def held(texts: list[str], **kwargs: Any) -> Any:
        vectors = list(real_embed(texts, **kwargs))  # the session is entered for this batch
        inside.set()
        release.wait(60)
        return vectors

    embedder._model.embed = held  # type: ignore[method-assign]
    batch = ThreadPoolExecutor(1).submit(embedder.embed, ["def connect(): return Redis()"] * 4)
    try:
        assert inside.wait(60)
        embedder._model.embed = real_embed  # type: ignore[method-assign]
        during = embedder.embed_query("how are redis settings parsed")
        assert not batch.done()
    finally:
        release.set()
    assert len(batch.result(60)) == 4
    assert np.allclose(during, idle, atol=1e-6)


def test_the_model_writes_nothing_outside_the_data_dir(tmp_path: Path) -> None:
    """onnxruntime wrote ~/.cache/Microsoft/DeveloperTools/.onnxruntime/{deviceid,onnxruntime.db}
    (its telemetry) at the first model load: outside the data dir."""
    import subprocess

    home = tmp_path / "home"
    home.mkdir()
    script = (
        "import sys; from pathlib import Path; "
        "import memoryd.searchindex.vectors; "  # it loads onnxruntime first, as the daemon does
        "from memoryd.embedding import Embedder; "
        "Embedder(sys.argv[1], Path(sys.argv[2])).embed(['hello'])"
    )
    env = {
        k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "ORT_DISABLE_TELEMETRY")
    }
    done = subprocess.run(
        [sys.executable, "-c", script, DEFAULT_MODEL, str(tmp_path / "models")],
        env={**env, "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.relative_to(home) for p in home.rglob("*")) == []


def _session_threads(embedder: Embedder) -> int:
    """The intra-op threads of the model's onnxruntime session, as its options say."""
    session = embedder._model.model.model  # fastembed's TextEmbedding > its ONNX model > session
    threads: int = session.get_session_options().intra_op_num_threads
    return threads


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own niceness is Linux's")
def test_embed_cores_is_the_number_of_threads_batch_embedding_runs_on(tmp_path: Path) -> None:
    """The CPU budget reaches the model's session: `embed_cores` threads run a batch (the
    niced batch thread and embed_cores - 1 workers of the session's pool), no more; the
    default, from the settings, is one."""
    from memoryd.config import Settings

    assert Settings().embed_cores == 1
    texts = ["def connect(settings): return Redis(settings.host)"] * 4
    # A first model makes the threads every later one shares (the tokenizer's pool).
    Embedder(DEFAULT_MODEL, tmp_path / "models", embed_cores=1).embed(texts)
    caller = _threads()[threading.get_native_id()]
    for cores in (1, 3):
        before = _threads()
        embedder = Embedder(DEFAULT_MODEL, tmp_path / "models", embed_cores=cores)
        embedder.embed(texts)
        assert _session_threads(embedder) == cores
        started = {t: nice for t, nice in _threads().items() if t not in before}
        niced = [t for t, nice in started.items() if nice == batch_nice(caller)]
        assert len(niced) == cores, started


def test_the_embedding_rate_is_measured_over_the_last_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`status` estimates the time left from the model's rate: none until enough batches
    ended; then the texts of the batches after the first over the time between their ends;
    batches older than the window no longer count."""
    import memoryd.embedding as embedding

    embedder = Embedder(DEFAULT_MODEL, tmp_path / "models", batch_size=1)
    embedder._done.clear()  # the dimension probe's batch
    texts = [f"def handler_{n}(request): return respond(request, {n})" for n in range(12)]
    embedder.embed(texts[: embedding.RATE_MIN_BATCHES - 1])
    assert embedder.rate() is None
    embedder.embed(texts[embedding.RATE_MIN_BATCHES - 1 :])
    ends = [at for at, _ in embedder._done]
    assert len(ends) == len(texts)
    assert embedder.rate() == pytest.approx((len(texts) - 1) / (ends[-1] - ends[0]))
    # A window that ends before now holds none of them.
    monkeypatch.setattr(embedding, "RATE_SECONDS", time.monotonic() - ends[-1] - 1e-3)
    assert embedder.rate() is None


def test_a_model_loaded_at_its_first_text_embeds_as_one_loaded_at_once(
    tmp_path: Path, embedder: Embedder
) -> None:
    """A one-shot command's model (`load_now=False`) is not loaded until a text needs it (most
    commands only read the database); then its vectors are the eagerly loaded model's."""
    texts = ["how are redis settings parsed from a dsn", "def create_pool(settings):"]
    batch = Embedder(DEFAULT_MODEL, tmp_path / "models", load_now=False)
    query = Embedder(DEFAULT_MODEL, tmp_path / "models", load_now=False)
    assert (batch._model, query._model) == (None, None)
    assert np.allclose(batch.embed(texts), embedder.embed(texts), atol=1e-6)
    assert np.allclose(query.embed_query(texts[0]), embedder.embed_query(texts[0]), atol=1e-6)
    assert batch._model is not None and query._model is not None
    assert (batch.dim, query.dim) == (384, 384)
    unknown = Embedder("nobody/no-such-model", tmp_path / "models", load_now=False)
    with pytest.raises(MemorydError, match="cannot load embedding model 'nobody/no-such-model'"):
        unknown.embed(texts)
