"""Indexing progress per project (schema/007_index_progress.surql): started by a whole-project
sync, advanced by each of its index jobs, read by `status`.

Two workers finishing jobs of one sync write the same row at once; the engine refuses one of
the two ("write conflict"), so each write is a transaction, which the store retries."""

from __future__ import annotations

from typing import Any

from memoryd.store.base import StoreBase, key_of, rid

_FIELDS = "state, files_total, files_done, chunks, started_at, finished_at, last_error"


class ProgressQueries(StoreBase):
    async def start_progress(self, project_id: str, run: str, files_total: int) -> None:
        """A new sync of `files_total` files; one of no files is ready at once."""
        await self.query(
            "BEGIN; "
            "UPSERT $id CONTENT {run: $run, files_total: $total, files_done: 0, chunks: 0, "
            "state: IF $total = 0 THEN 'ready' ELSE 'indexing' END, started_at: time::now(), "
            "finished_at: IF $total = 0 THEN time::now() ELSE NONE END, last_error: NONE}; "
            "COMMIT;",
            {"id": rid("index_progress", project_id), "run": run, "total": files_total},
        )

    async def advance_progress(
        self, project_id: str, run: str, files: int, chunks: int, error: str | None
    ) -> dict[str, Any] | None:
        """Count one finished job of sync `run` (a job of an older sync counts for nothing).
        Returns the progress when this job was the one that finished the sync, else None.
        Two workers finishing jobs at once both count, and only one of them sees the sync
        finish."""
        params = {
            "id": rid("index_progress", project_id),
            "run": run,
            "files": files,
            "chunks": chunks,
            "error": error,
        }
        results = await self.query(
            "BEGIN; "
            "UPDATE $id SET files_done = math::min([files_total, files_done + $files]), "
            "chunks += $chunks, last_error = $error ?? last_error WHERE run = $run; "
            "LET $finished = (UPDATE $id SET state = 'ready', finished_at = time::now() "
            "WHERE run = $run AND state = 'indexing' AND files_done >= files_total "
            f"RETURN {_FIELDS}); "
            "RETURN {finished: $finished}; "
            "COMMIT;",
            params,
        )
        # The RETURN's is the last object result (BEGIN and COMMIT may have entries too).
        finished = next(r for r in reversed(results) if isinstance(r, dict))["finished"]
        return finished[0] if finished else None

    async def fail_progress(self, project_id: str, run: str, error: str) -> None:
        """A job of sync `run` failed as a whole: its files will not be counted."""
        await self.query(
            "BEGIN; "
            "UPDATE $id SET state = 'failed', last_error = $error, finished_at = time::now() "
            "WHERE run = $run; "
            "COMMIT;",
            {"id": rid("index_progress", project_id), "run": run, "error": error},
        )

    async def index_progress(self) -> dict[str, dict[str, Any]]:
        """Every project's progress, by project id."""
        rows = (await self.query(f"SELECT id, {_FIELDS} FROM index_progress"))[0] or []
        return {key_of(row.pop("id")): row for row in rows}
