"""The first-pass embedding: static token vectors distilled from the shipped model.

The full model (memoryd.embedding) does ~37 code chunks a second on two cores, so a large
repository waits an hour for meaning. A first pass makes every chunk searchable by meaning
as soon as its words are indexed; the full model refines in the background.

The model2vec recipe, computed once from the installed int8 ONNX model (model2vec's own
`distill` needs torch and a model hub): each vocabulary token is run through the model alone
(`[CLS] token [SEP]`, mean-pooled as the model pools a text), the table is reduced by PCA, and
each token is weighted by SIF over a Zipf estimate of its frequency (the vocabulary is ordered
roughly by frequency). A text's vector is then the mean of its tokens' rows, unit length: a
tokenisation and a sum, no network: 0.43 s of CPU for 560 chunk texts of click, where the model
took 87 s (200x cheaper per chunk; measured on a shared machine at load 41).

The table ships in the package (`static_table.npy`, float16, 15.6 MB; derived from
all-MiniLM-L6-v2, Apache-2.0, see static_table.NOTICE), made by `python -m
memoryd.static_embedding memoryd/static_table.npy`. Deriving it at a data dir's first start
instead was measured at 52 s of CPU (175 s on a machine with load 7.6): every new data dir,
every test's and every CI run's, would pay it before its first chunk got a vector.
The vectors are of their own space, never compared with the full model's: the search indexes
keep them apart (memoryd.searchindex).
"""

from __future__ import annotations

import argparse
import functools
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from memoryd import heap
from memoryd.embedding import packaged_model_files

if TYPE_CHECKING:
    from tokenizers import Tokenizer

# The name stored with first-pass vectors; a change of the recipe below takes a new name, so
# an index of the old table's vectors is rebuilt rather than compared with the new.
FIRST_PASS_MODEL = "memoryd/all-MiniLM-L6-v2-static-v1"
FIRST_PASS_DIM = 256
# SIF's coefficient (model2vec's default): a token of Zipf probability p weighs a / (a + p).
SIF = 1e-4
# Tokens the model sees per vocabulary batch while distilling.
DISTILL_BATCH = 1024
# Tokens of a text that count: more than the full model's 256 (a sum is cheap), bounded so a
# huge chunk does not cost more than it tells.
MAX_TOKENS = 1024
# Texts tokenised per call of the tokenizer (which spreads a call over the cores).
ENCODE_BATCH = 4096
TABLE = Path(__file__).with_name("static_table.npy")


def _tokenizer(path: Path) -> Tokenizer:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    # The shipped tokenizer pads and truncates for the model's batches; a sum needs neither.
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def distill(onnx: Path, tokenizer_path: Path, dims: int = FIRST_PASS_DIM) -> np.ndarray:
    """The token table: (vocabulary size, dims) float32, rows weighted, not unit length."""
    import onnxruntime

    tokenizer = _tokenizer(tokenizer_path)
    size = tokenizer.get_vocab_size()
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    session = onnxruntime.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    rows = np.empty((size, 384), np.float32)
    for start in range(0, size, DISTILL_BATCH):
        ids = np.arange(start, min(size, start + DISTILL_BATCH), dtype=np.int64)
        batch = np.stack([np.full_like(ids, cls), ids, np.full_like(ids, sep)], axis=1)
        [hidden] = session.run(
            None,
            {
                "input_ids": batch,
                "attention_mask": np.ones_like(batch),
                "token_type_ids": np.zeros_like(batch),
            },
        )
        rows[start : start + len(ids)] = hidden.mean(axis=1)
    # PCA: centred, onto the top `dims` directions (an SVD of the 30k x 384 table).
    centred = rows - rows.mean(axis=0)
    _, _, components = np.linalg.svd(centred, full_matrices=False)
    table = centred @ components[:dims].T
    rank = np.arange(2, size + 2, dtype=np.float64)
    probability = (1 / rank) / np.sum(1 / rank)
    table *= (SIF / (SIF + probability))[:, None]
    return table.astype(np.float32)


class StaticEmbedder:
    """Unit-length vectors of texts from the token table; thread-safe (no state per call)."""

    def __init__(self, table: Path = TABLE) -> None:
        _, tokenizer_path = packaged_model_files()
        self.model = FIRST_PASS_MODEL
        self._tokenizer = _tokenizer(tokenizer_path)
        # Held as float32 (31 MB, not 15.6): summing gathered float16 rows costs 2.5x the CPU
        # (1.7 s against 0.69 s for 10k chunk texts, measured), and at 1M texts that is minutes.
        self._table = np.load(table).astype(np.float32)
        self._special = np.zeros(len(self._table), bool)
        for token in ("[CLS]", "[SEP]", "[UNK]", "[PAD]"):
            self._special[self._tokenizer.token_to_id(token)] = True
        self.dim = self._table.shape[1]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """A (len(texts), dim) float32 matrix of unit rows (a text of no known token: zeros)."""
        out = np.zeros((len(texts), self.dim), np.float32)
        # Tokenised a slice at a time: an encoding holds its tokens, offsets and masks (~20 kB
        # for a chunk), so a million texts at once would hold gigabytes.
        for lo in range(0, len(texts), ENCODE_BATCH):
            encodings = self._tokenizer.encode_batch(list(texts[lo : lo + ENCODE_BATCH]))
            for i, encoding in enumerate(encodings, lo):
                ids = np.asarray(encoding.ids[1:-1][:MAX_TOKENS], np.int64)
                ids = ids[~self._special[ids]]
                if len(ids):
                    vector = self._table[ids].sum(axis=0)
                    norm = float(np.linalg.norm(vector))
                    if norm > 0:
                        out[i] = vector / norm
        return out


@functools.cache
def load() -> StaticEmbedder:
    """The process's first-pass embedder (its table loaded once)."""
    return StaticEmbedder()


class WhenUsed:
    """The process's first-pass embedder, its table loaded at the first text: a one-shot
    command that only reads the database never pays for it (some 0.15 CPU s). `loaded` is
    told the memory the load took (the table's 31 MB are not the database's growth)."""

    model = FIRST_PASS_MODEL
    dim = FIRST_PASS_DIM

    def __init__(self, loaded: Callable[[int], None] | None = None) -> None:
        self._loaded = loaded
        self._loading = threading.Lock()
        self._embedder: StaticEmbedder | None = None

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self._embedder is None:
            with self._loading:
                if self._embedder is None:
                    self._embedder = heap.told_what_it_took(load, self._loaded)
        return self._embedder.embed(texts)


def main() -> None:
    parser = argparse.ArgumentParser(description="Distill the first-pass table; time it.")
    parser.add_argument("out", type=Path, help="the .npy file to write (float16)")
    args = parser.parse_args()
    onnx, tokenizer_path = packaged_model_files()
    started, cpu = time.perf_counter(), time.process_time()
    table = distill(onnx, tokenizer_path)
    print(
        f"distilled {table.shape} in {time.perf_counter() - started:.1f}s "
        f"({time.process_time() - cpu:.1f}s of CPU)"
    )
    np.save(args.out, table.astype(np.float16))


if __name__ == "__main__":
    main()
