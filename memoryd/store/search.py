"""Hybrid search in the database: HNSW k-NN and BM25, fused with RRF."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memoryd.store.base import StoreBase, key_of, rid

# Candidates per ranked list before fusion: enough that filters still leave `limit`.
_CANDIDATE_FACTOR = 4
_HNSW_EF = 100
# The k-NN takes this many neighbours per candidate and filters them afterwards: a filter
# inside the HNSW scan loads every record it visits and costs seconds on a few thousand
# chunks. When the filters leave too few, k grows, up to _KNN_MAX; beyond that the rows are
# left to BM25 (it happens in the middle of a model migration).
_KNN_OVERSAMPLE = 4
_KNN_MAX = 4096
_RRF_K = 60


@dataclass(frozen=True, slots=True)
class SearchHit:
    table: str
    id: str
    score: float
    fields: dict[str, Any]


class SearchQueries(StoreBase):
    async def hybrid_search(
        self,
        table: str,
        text_field: str,
        vector: list[float],
        text: str,
        limit: int,
        filters: dict[str, Any],
        fields: Sequence[str],
        model: str,
    ) -> list[SearchHit]:
        """k-NN over the HNSW index and BM25 over the full-text index, fused with RRF. The
        k-NN compares only vectors of `model` (never two models in one ranking); BM25 also
        finds rows whose vectors still wait for re-embedding."""
        where, params, read = _filter_clause(filters)
        candidates = max(limit * _CANDIDATE_FACTOR, 20)
        params |= {"vec": vector, "text": text, "model": model}
        # What the filters read, so they can run on the k-NN's output (see _KNN_OVERSAMPLE).
        projected = ", ".join(sorted({"embedding_model", *read}))
        k = candidates * _KNN_OVERSAMPLE
        while True:
            rows = await self.query(
                f"""
                LET $near = SELECT id, {projected}, vector::distance::knn() AS distance
                    FROM {table} WHERE embedding <|{k},{max(k, _HNSW_EF)}|> $vec;
                LET $vs = SELECT id, distance FROM $near WHERE embedding_model = $model
                    {where} ORDER BY distance LIMIT {candidates};
                LET $ft = SELECT id, search::score(1) AS ft_score FROM {table}
                    WHERE {text_field} @1,OR@ $text {where}
                    ORDER BY ft_score DESC LIMIT {candidates};
                RETURN {{
                    near: array::len($near), kept: array::len($vs),
                    fused: search::rrf([$vs, $ft], {limit}, {_RRF_K})
                }};
                """,
                params,
            )
            result = rows[-1]
            if result["kept"] >= candidates or result["near"] < k or k >= _KNN_MAX:
                break
            k = min(k * _KNN_OVERSAMPLE, _KNN_MAX)
        fused = result["fused"] or []
        if not fused:
            return []
        ids = [row["id"] for row in fused]
        details = (await self.query(f"SELECT id, {', '.join(fields)} FROM $ids", {"ids": ids}))[
            0
        ] or []
        by_id = {key_of(row["id"]): row for row in details}
        hits = []
        for row in fused:
            key = key_of(row["id"])
            if key in by_id:
                found = dict(by_id[key])
                found.pop("id", None)
                hits.append(SearchHit(table, key, float(row["rrf_score"]), found))
        return hits


def _filter_clause(filters: dict[str, Any]) -> tuple[str, dict[str, Any], set[str]]:
    """`AND field = $f_field ...` for equality filters, its parameters and the fields it reads.
    `valid_at`: rows valid at that time (valid_from <= t < valid_until); `valid_now`: rows not
    closed yet."""
    parts: list[str] = []
    params: dict[str, Any] = {}
    read: set[str] = set()
    for name, value in filters.items():
        if name == "valid_now":
            if value:
                parts.append("valid_until IS NONE")
                read.add("valid_until")
            continue
        if name == "valid_at":
            parts.append(
                "valid_from <= $valid_at AND (valid_until IS NONE OR valid_until > $valid_at)"
            )
            params["valid_at"] = value
            read |= {"valid_from", "valid_until"}
            continue
        if value is None:
            continue
        if name == "project":
            value = rid("project", value)
        parts.append(f"{name} = $f_{name}")
        params[f"f_{name}"] = value
        read.add(name)
    return ("AND " + " AND ".join(parts) if parts else ""), params, read
