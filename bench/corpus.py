"""Distinct real texts for the search benches: chunks of real source trees as the indexer cuts
them, then (when a size asks for more) line windows of the same files, and memories from the
vendored transcripts. No text appears twice: the ANN is measured on what users store, not on
copies of a few hundred seeds.

Vectors of those texts, cached by text under a directory the caller names (kept out of the
repo): the real model's (`model_vectors`), or, where the real model would take hours (100k
texts take ~45 minutes of two cores), a static stand-in in the model's own output space
(`static_vectors`): each vocabulary token embedded once by the real model, a text's vector the
mean of its tokens' vectors (the model2vec recipe without its PCA and weighting).
"""

from __future__ import annotations

import functools
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import blake3
import numpy as np

from bench.fixture_rows import whole_file_rows
from memoryd.config import DEFAULT_MODEL
from memoryd.embedding import Embedder, packaged_model_files
from memoryd.searchindex import Doc, chunk_kind
from memoryd.searchindex.indexsync import doc_of
from tests.chunk_docs import chunk_docs
from tests.fixtures import TRANSCRIPTS
from workers.stages.chunking import language_for_path

# Window sizes (lines) of the extra texts, once the trees' chunks run out.
if TYPE_CHECKING:
    from tokenizers import Tokenizer

WINDOW_LINES = (12, 24)
MAX_FILE_BYTES = 400_000


def _files(tree: Path) -> list[Path]:
    return sorted(
        p
        for p in tree.rglob("*")
        if p.is_file() and ".git" not in p.parts and p.stat().st_size <= MAX_FILE_BYTES
    )


def _read(path: Path) -> str | None:
    try:
        text = path.read_text()
    except (UnicodeDecodeError, OSError):
        return None
    return text if text.strip() else None


def code_docs(trees: list[Path], count: int, valid_from: int, seed: int = 7) -> list[Doc]:
    """`count` code rows of distinct texts, in a seeded random order (so any prefix is a
    sample of every tree): the indexer's chunks of every file, then line windows."""
    seen: set[bytes] = set()
    chunks: list[Doc] = []

    def fresh(text: str) -> bool:
        digest = blake3.blake3(text.encode()).digest()
        if digest in seen or not text.strip():
            return False
        seen.add(digest)
        return True

    files = [(tree, path) for tree in trees for path in _files(tree)]
    for tree, path in files:
        if (text := _read(path)) is None:
            continue
        rel = path.relative_to(tree).as_posix()
        for doc in chunk_docs(tree.name, rel, text, "", valid_from):
            if fresh(doc.content):
                chunks.append(doc)
    rng = random.Random(seed)
    rng.shuffle(chunks)
    if len(chunks) >= count:
        return chunks[:count]
    extra: list[Doc] = []
    for width in WINDOW_LINES:
        for tree, path in files:
            if (text := _read(path)) is None:
                continue
            rel = path.relative_to(tree).as_posix()
            language = language_for_path(rel)
            lines = text.splitlines(keepends=True)
            for start in range(0, max(len(lines) - width, 0) + 1, max(width // 4, 1)):
                window = "".join(lines[start : start + width])
                if not fresh(window):
                    continue
                extra.append(
                    Doc(
                        table="code_chunk",
                        id=f"{tree.name}:{rel}:w{width}:{start}",
                        kind=chunk_kind(rel, language),
                        content=window,
                        project=tree.name,
                        path=rel,
                        language=language,
                        valid_from=valid_from,
                        fields={"start_line": start + 1, "end_line": start + width},
                    )
                )
            if len(chunks) + len(extra) >= count * 2:
                break
        if len(chunks) + len(extra) >= count * 2:
            break
    rng.shuffle(extra)
    return (chunks + extra)[:count]


def memory_docs(count: int) -> Iterator[tuple[Doc, bool]]:
    """Up to `count` memory rows of distinct texts, each with whether ingestion embeds it:
    the vendored transcripts' memories, each text once."""
    seen: set[str] = set()
    made = 0
    for path in sorted(TRANSCRIPTS.rglob("*.json*")):
        found = whole_file_rows(str(path))
        if found is None:
            continue
        rows = found[2]
        embedded = {id(row) for row, _ in rows.embed}
        for row in rows.tables.get("memories", []):
            text = row.get("content") or ""
            if not text.strip() or text in seen:
                continue
            seen.add(text)
            yield (
                doc_of("memory", {**row, "key": row["id"].key, "embedding": None}, ""),
                (id(row) in embedded),
            )
            made += 1
            if made >= count:
                return


def _digest(text: str) -> bytes:
    return blake3.blake3(text.encode()).digest()


class VectorCache:
    """Vectors by text digest in `directory` (one .npz per kind of vector)."""

    def __init__(self, directory: Path, name: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{name}.npz"
        self.known: dict[bytes, np.ndarray] = {}
        if self.path.exists():
            data = np.load(self.path)
            digests = (row.tobytes() for row in data["digests"])
            self.known = dict(zip(digests, data["vectors"], strict=True))

    def save(self) -> None:
        digests = np.frombuffer(b"".join(self.known), np.uint8).reshape(-1, 32)
        vectors = np.stack(list(self.known.values())) if self.known else np.empty((0, 384))
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, digests=digests, vectors=vectors.astype(np.float32))
        tmp.replace(self.path)


def model_vectors(texts: list[str], cache_dir: Path, save_every: int = 500) -> np.ndarray:
    """The real model's vectors of `texts` (cached: a run that is stopped keeps what it did)."""
    cache = VectorCache(cache_dir, "model")
    missing = [t for t in dict.fromkeys(texts) if _digest(t) not in cache.known]
    if missing:
        embedder = Embedder(DEFAULT_MODEL, cache_dir / "models", embed_cores=os.cpu_count() or 1)
        for lo in range(0, len(missing), save_every):
            part = missing[lo : lo + save_every]
            # On this thread, at the bench's own priority: `embed` runs batches 10 nicer, for
            # a daemon that must leave the cores to queries, and on a loaded machine it starves.
            vectors = embedder._model.embed(part, batch_size=8)
            for text, vector in zip(part, vectors, strict=True):
                cache.known[_digest(text)] = np.asarray(vector, np.float32)
            cache.save()
            print(f"  model vectors: {lo + len(part)}/{len(missing)} embedded", flush=True)
    return np.stack([cache.known[_digest(t)] for t in texts])


@functools.cache
def _token_vectors(cache_dir: Path) -> np.ndarray:
    """The real model's output for each vocabulary token alone ([CLS] token [SEP], mean
    pooled, unit length), computed once."""
    path = cache_dir / "token_vectors.npy"
    if path.exists():
        return np.load(path)
    import onnxruntime as ort
    from tokenizers import Tokenizer

    onnx, tokenizer_file = packaged_model_files()
    vocab = Tokenizer.from_file(str(tokenizer_file)).get_vocab_size()
    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    out = np.zeros((vocab, 384), np.float32)
    batch = 512
    for lo in range(0, vocab, batch):
        ids = np.arange(lo, min(lo + batch, vocab), dtype=np.int64)
        input_ids = np.stack([np.full_like(ids, 101), ids, np.full_like(ids, 102)], axis=1)
        feed = {"input_ids": input_ids, "attention_mask": np.ones_like(input_ids)}
        if "token_type_ids" in names:
            feed["token_type_ids"] = np.zeros_like(input_ids)
        hidden = session.run(None, feed)[0]
        pooled = hidden.mean(axis=1)
        out[lo : lo + len(ids)] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    cache_dir.mkdir(parents=True, exist_ok=True)
    np.save(path, out)
    return out


@functools.cache
def _tokenizer() -> Tokenizer:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(packaged_model_files()[1]))
    tokenizer.enable_truncation(256)
    return tokenizer


def static_vectors(texts: list[str], cache_dir: Path) -> np.ndarray:
    """Each text's vector as the mean of its tokens' `_token_vectors` (special tokens left
    out), unit length: cheap (no model call per text) and in the model's output space."""
    table, tokenizer = _token_vectors(cache_dir), _tokenizer()
    out = np.empty((len(texts), table.shape[1]), np.float32)
    special = np.zeros(len(table), bool)
    special[[0, 100, 101, 102]] = True
    step = 10_000
    for lo in range(0, len(texts), step):
        encodings = tokenizer.encode_batch(texts[lo : lo + step])
        for i, encoding in enumerate(encodings):
            ids = np.asarray(encoding.ids, np.int64)
            # A mask, not a Python filter per token: at 1M texts that loop took minutes.
            ids = ids[~special[ids]]
            mean = table[ids if len(ids) else [100]].mean(axis=0)
            out[lo + i] = mean / max(float(np.linalg.norm(mean)), 1e-12)
    return out
