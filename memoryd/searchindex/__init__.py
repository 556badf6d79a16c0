"""Search indexes derived from SurrealDB's records: tantivy for BM25, usearch for vectors."""

from .index import Doc, Hit, SearchIndex, label_of, micros
from .kinds import PRIORS, chunk_kind
from .lexical import Filters
from .text import keywords, named_files, query_terms

__all__ = [
    "PRIORS",
    "Doc",
    "Filters",
    "Hit",
    "SearchIndex",
    "chunk_kind",
    "keywords",
    "label_of",
    "micros",
    "named_files",
    "query_terms",
]
