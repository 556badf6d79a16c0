"""Decay, prune, pins, access counts, maintenance runs and re-embedding."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memoryd.store.base import StoreBase, pack_vector, rid
from memoryd.store.blobs import BODIES_OF_DOOMED, BODY, DROP_ORPHAN_BODIES, whole_texts
from memoryd.store.code import OWES_VECTOR
from memoryd.store.schema import VECTOR_TABLES
from memoryd.store.search import BUMP_GENERATION, SEARCH_FIELDS, returned

# A row that should carry a vector of the configured model ($model) and does not: embedded with
# another model, or its vector dropped when the dimension changed (or imported without one).
# Rows with no model are not embedded at all (kinds that are not, texts too long).
_STALE_VECTOR = "embedding_model IS NOT NONE AND (embedding_model != $model OR embedding IS NONE)"


def _stale_vector(table: str) -> str:
    """What `reembed` takes of `table`. A chunk written without its vector of the configured
    model is not stale but owed: its `embed_chunks` job (or the catch-up a start queues) embeds
    it, and reembed taking it too embedded it twice."""
    if table == "code_chunk":
        return f"{_STALE_VECTOR} AND NOT ({OWES_VECTOR})"
    return _STALE_VECTOR


def _age(field: str) -> str:
    """Seconds from `field` to $at, negative for a time after $at (a fast clock): computed on
    unix seconds, since a negative duration fails the whole statement."""
    return f"(time::unix($at) - time::unix({field}))"


_LAST_TOUCHED = "(last_accessed ?? event_time ?? ingestion_time)"
# Idle runs from the last read or else from when memoryd took the memory in, not from when it
# happened: months of transcripts a new user's first start ingests get their whole idle window
# to be found before prune may take them.
_LAST_KEPT = "(last_accessed ?? ingestion_time ?? event_time)"
# A memory's importance at $at: 0.5^(age / half-life of its kind) x (1 + boost x ln(1 +
# access_count)), capped at 1, where age runs from the last access or else the event (a time in
# the future, from a fast clock, counts as age 0 instead of failing the statement).
_IMPORTANCE = (
    f"math::min([1.0, math::pow(0.5, math::max([0.0, {_age(_LAST_TOUCHED)}]) / 86400.0"
    " / ($half[kind] ?? $half_default)) * (1.0 + $boost * math::ln(1.0 + access_count))])"
)
# Decay rewrites a memory only when its importance moved this much since it was last stored:
# a rewrite is a whole row in the engine's log, and rewriting every memory on every run made
# the database grow by its own size each time (bench/months.py). Prune does not read the
# stored value: it works importance out afresh, so it deletes on time whatever the step.
DECAY_STEP = 0.05
_EXPIRED = f"valid_until IS NOT NONE AND {_age('valid_until')} > $retention"
# What prune deletes, one rule an entry: (table, condition). A memory may meet both of its rules.
PRUNE_RULES = (
    ("code_chunk", _EXPIRED),
    ("memory", f"pinned = false AND {_EXPIRED}"),
    ("memory", f"pinned = false AND {_IMPORTANCE} < $floor AND {_age(_LAST_KEPT)} > $idle"),
)
PRUNED_TABLES = ("code_chunk", "memory")


def _prune_condition(table: str) -> str:
    return " OR ".join(f"({where})" for t, where in PRUNE_RULES if t == table)


# A row a prune deletes, whatever its table (for the entities it would leave orphaned).
_DOOMED = " OR ".join(
    f"(meta::tb(id) = '{table}' AND ({_prune_condition(table)}))" for table in PRUNED_TABLES
)
# Entities that nothing points at, or only rows a prune deletes.
_ORPHANED_BY_PRUNE = f"count(->?) = 0 AND count((<-?<-?)[WHERE !({_DOOMED})]) = 0"


@dataclass(frozen=True, slots=True)
class Decay:
    """How importance fades: half-lives in days per memory kind (`default_half_life` for a
    kind not listed) and the boost of each read."""

    half_lives: dict[str, float]
    default_half_life: float
    access_boost: float

    def params(self) -> dict[str, Any]:
        return {
            "half": self.half_lives,
            "half_default": self.default_half_life,
            "boost": self.access_boost,
        }


@dataclass(frozen=True, slots=True)
class PruneRules:
    """What prune deletes at `at`: rows invalid for `retention_days`, and unpinned memories
    whose importance is below `floor` and that were not read for `idle_days`."""

    at: datetime
    retention_days: float
    floor: float
    idle_days: float
    decay: Decay

    def params(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "retention": self.retention_days * 86400.0,
            "floor": self.floor,
            "idle": self.idle_days * 86400.0,
        } | self.decay.params()


class MaintenanceQueries(StoreBase):
    async def decay_memories(
        self, at: datetime, decay: Decay, after: str, batch: int
    ) -> tuple[int, int, str | None]:
        """Work out the importance of one batch of unpinned memories (by id order, after
        `after`) and store it where it moved by DECAY_STEP or more.
        Returns (memories looked at, memories rewritten, last id)."""
        rows = await self.query(
            f"""
            LET $seen = SELECT VALUE id FROM memory WHERE pinned = false AND id > $after
                ORDER BY id LIMIT $batch;
            LET $moved = UPDATE $seen SET importance = {_IMPORTANCE}
                WHERE math::abs({_IMPORTANCE} - importance) >= $step RETURN VALUE id;
            RETURN {{
                seen: array::len($seen),
                moved: array::len($moved),
                last: IF array::len($seen) > 0 THEN record::id(array::last($seen)) END,
            }};
            """,
            {"at": at, "after": rid("memory", after), "batch": batch, "step": DECAY_STEP}
            | decay.params(),
        )
        done = next(r for r in reversed(rows) if isinstance(r, dict) and "seen" in r)
        return done["seen"], done["moved"], done["last"]

    async def prune_candidates(self, rules: PruneRules, batch: int) -> dict[str, list[str]]:
        """What a prune deletes next: at most `batch` rows per rule."""
        results = await self.query(
            "; ".join(
                f"SELECT VALUE record::id(id) FROM {table} WHERE {where} LIMIT $batch"
                for table, where in PRUNE_RULES
            ),
            rules.params() | {"batch": batch},
        )
        found: dict[str, set[str]] = {table: set() for table in PRUNED_TABLES}
        for (table, _), keys in zip(PRUNE_RULES, results, strict=True):
            found[table].update(keys or [])
        return {table: sorted(keys) for table, keys in found.items()}

    async def prune_preview(
        self, rules: PruneRules, sample: int
    ) -> dict[str, tuple[int, list[str]]]:
        """What a whole prune would delete, deleting nothing: per table the count and the first
        `sample` keys. Entities are those the deletions would leave with no edge (or have none)."""
        conditions = {table: _prune_condition(table) for table in PRUNED_TABLES}
        conditions["entity"] = _ORPHANED_BY_PRUNE
        results = await self.query(
            "; ".join(
                f"SELECT count() AS n FROM {table} WHERE {where} GROUP ALL; "
                f"SELECT VALUE record::id(id) FROM {table} WHERE {where} LIMIT $sample"
                for table, where in conditions.items()
            ),
            rules.params() | {"sample": sample},
        )
        counts, samples = results[0::2], results[1::2]
        return {
            table: ((n[0]["n"] if n else 0), sorted(keys or []))
            for table, n, keys in zip(conditions, counts, samples, strict=True)
        }

    async def delete_rows(self, table: str, keys: list[str]) -> int | None:
        """Delete rows and the edges touching them (DELETE of a record removes its edges).
        Returns the search generation after it, for a searchable table."""
        if not keys:
            return None
        bump = BUMP_GENERATION if table in SEARCH_FIELDS else "LET $generation = NONE;"
        delete = (
            f"{BODIES_OF_DOOMED} DELETE $doomed; {DROP_ORPHAN_BODIES}"
            if table == "memory"
            else "DELETE $doomed;"
        )
        result = await self.query(
            f"BEGIN; {delete} {bump} RETURN {{ generation: $generation }}; COMMIT;",
            {"doomed": [rid(table, k) for k in keys]},
        )
        return returned(result)["generation"]

    async def orphan_entities(self, batch: int) -> list[str]:
        """Entities nothing points at any more (no edge in or out)."""
        rows = await self.query(
            "SELECT VALUE record::id(id) FROM entity WHERE count(<-?) = 0 AND count(->?) = 0 "
            "LIMIT $batch",
            {"batch": batch},
        )
        return sorted(rows[0] or [])

    async def set_pinned(self, table: str, key: str, pinned: bool) -> bool:
        rows = await self.query(
            "UPDATE $id SET pinned = $pinned, importance = 1.0 RETURN id",
            {"id": rid(table, key), "pinned": pinned},
        )
        return bool(rows[0])

    async def bump_access(self, table: str, keys: Sequence[str], at: datetime) -> None:
        """Reading a memory counts: decay starts again from now, and often-read ones last.
        A transaction, so that the store retries it when another process bumps the same
        memories at once (the engine refuses all but one of such writes)."""
        if keys:
            await self.query(
                "BEGIN; UPDATE $ids SET access_count += 1, last_accessed = $at; COMMIT;",
                {"ids": [rid(table, k) for k in keys], "at": at},
            )

    async def record_maintenance(
        self,
        task: str,
        started: datetime,
        result: dict[str, Any],
        dry_run: bool,
        job_id: str | None = None,
    ) -> None:
        await self.query(
            "CREATE maintenance_run CONTENT {task: $task, started_at: $started, "
            "finished_at: time::now(), dry_run: $dry, result: $result, job_id: $job}",
            {"task": task, "started": started, "dry": dry_run, "result": result, "job": job_id},
        )

    async def maintenance_runs(self, task: str) -> list[dict[str, Any]]:
        """Every recorded run of a task, oldest first."""
        rows = await self.query(
            "SELECT task, job_id, started_at, finished_at, result FROM maintenance_run "
            "WHERE task = $task ORDER BY started_at",
            {"task": task},
        )
        return rows[0] or []

    async def last_maintenance(self) -> dict[str, dict[str, Any]]:
        rows = await self.query(
            "SELECT task, started_at, finished_at, dry_run, result FROM maintenance_run "
            "WHERE dry_run = false ORDER BY finished_at DESC LIMIT 50"
        )
        last: dict[str, dict[str, Any]] = {}
        for row in rows[0] or []:
            last.setdefault(row["task"], row)
        return last

    async def stale_vectors(
        self, table: str, text_field: str, model: str, batch: int
    ) -> list[dict[str, Any]]:
        """Rows to embed (again) with `model`: embedded with another model, or their vector
        dropped when the dimension changed."""
        body = f", {BODY}" if table == "memory" else ""  # the whole text, not its head
        rows = await self.query(
            f"SELECT record::id(id) AS key, {text_field} AS text{body} FROM {table} "
            f"WHERE {_stale_vector(table)} LIMIT $batch",
            {"model": model, "batch": batch},
        )
        return whole_texts(rows[0] or [], "text")

    async def count_stale_vectors(self, model: str) -> dict[str, int]:
        return {t: n for t, (n, _) in (await self.vector_backlog(model)).items()}

    async def vector_backlog(self, model: str) -> dict[str, tuple[int, int]]:
        """Per table, the rows `reembed` embeds with `model` and the chunks that wait for their
        first vector (written without one, as indexing does, for their `embed_chunks` job): on
        a new install that is all of them, and none is a re-embedding."""
        statements = [
            f"SELECT count() AS n FROM {t} WHERE {where} GROUP ALL"
            for t in VECTOR_TABLES
            for where in (_stale_vector(t), OWES_VECTOR if t == "code_chunk" else "false")
        ]
        results = await self.query("; ".join(statements), {"model": model})
        counts = [rows[0]["n"] if rows else 0 for rows in results]
        return {t: (counts[2 * i], counts[2 * i + 1]) for i, t in enumerate(VECTOR_TABLES)}

    async def set_vectors(
        self, table: str, vectors: dict[str, list[float]], model: str
    ) -> tuple[int, list[str]]:
        """Store vectors of `model`; returns the search generation after it and the keys of
        the rows that were still there (one forgotten or pruned while its text was being
        embedded gets none, and none may reach the vector index either)."""
        result = await self.query(
            "BEGIN; LET $kept = array::flatten($rows.map(|$v| (UPDATE $v.id SET "
            "embedding = $v.embedding, embedding_model = $model RETURN VALUE record::id(id)))); "
            f"{BUMP_GENERATION} RETURN {{ generation: $generation, kept: $kept }}; COMMIT;",
            {
                "rows": [
                    {"id": rid(table, k), "embedding": pack_vector(v)} for k, v in vectors.items()
                ],
                "model": model,
            },
        )
        done = returned(result)
        return int(done["generation"]), list(done["kept"])
