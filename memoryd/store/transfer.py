"""Export and import: a table read page by page (whole, or the part of one project) and rows of
an export written back with their record references and times restored."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from surrealdb import RecordID

from memoryd.store.base import rid
from memoryd.store.blobs import BLOB_TABLE, INSERT_BLOBS, split_bodies
from memoryd.store.status import StatusQueries
from memoryd.vocabulary import EDGES

# Migration state belongs to the database it was applied to, never to an export.
# Blobs hold memories' texts, which are exported whole with their memories.
NOT_EXPORTED = frozenset({"schema_version", BLOB_TABLE})
# Per-file and per-run bookkeeping that no project owns: left out of a project's export.
UNOWNED = frozenset({"transcript_cursor", "maintenance_run"})

_MEMORY_EDGE = "in.session.project = $project"
# Which rows of a table belong to a project.
_PROJECT_SCOPE: dict[str, str] = {
    "project": "id = $project",
    "file_state": "project = $project",
    "code_chunk": "project = $project",
    "session": "project = $project",
    "memory": "session.project = $project",
    "goal": "session.project = $project",
    # Its own entities, and those of no project (commands, urls, files outside every
    # project) that one of its sessions acted on.
    "entity": "project = $project OR (project IS NONE AND count(<-(reads, modifies, executes, "
    "triggered, denied, mentions)[WHERE in.session.project = $project]) > 0)",
    "summary": "leaf_uuid IN (SELECT VALUE source_id FROM memory WHERE session.project = $project)",
    **{e.table: ("in.project = $project" if e.source != "memory" else _MEMORY_EDGE) for e in EDGES},
    # From an error (of no project) to the call that fixed it: the fixing session's project.
    "resolved_by": "out.session.project = $project",
}
# How the exporter writes a time (memoryd.store.base.plain).
_ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
# The type in a field's definition as INFO FOR TABLE gives it (`TYPE none | record<memory>`).
_TYPE = re.compile(r" TYPE (.+?)(?: DEFAULT | READONLY| VALUE | ASSERT | PERMISSIONS |$)")
# Record references of edges that no schema declares.
_EDGE_REFS = frozenset({"in", "out", "session"})


class TransferQueries(StatusQueries):
    async def export_tables(self, project: str | None) -> list[str]:
        tables = [t for t in await self.table_names() if t not in NOT_EXPORTED]
        if project is None:
            return tables
        return [t for t in tables if t not in UNOWNED and t in _PROJECT_SCOPE]

    async def project_rows_after(
        self, table: str, after: str | None, batch: int, project: str
    ) -> list[dict[str, Any]]:
        """One page of the rows of `table` that belong to `project` (see rows_after)."""
        return await self.rows_after(
            table, after, batch, _PROJECT_SCOPE[table], {"project": rid("project", project)}
        )

    async def _field_kinds(self, table: str) -> tuple[dict[str, str], bool]:
        """Top-level fields declared as record references or times, and whether `table` is
        a relation table."""
        info = (await self.query(f"INFO FOR TABLE {table}"))[0] or {}
        kinds: dict[str, str] = {}
        for name, definition in (info.get("fields") or {}).items():
            if "." in name or "[" in name:
                continue
            declared = _TYPE.search(definition)
            kind = declared[1] if declared else ""
            if "record" in kind:
                kinds[name] = "record"
            elif "datetime" in kind:
                kinds[name] = "datetime"
        tables = ((await self.query("INFO FOR DB"))[0] or {}).get("tables") or {}
        return kinds, "TYPE RELATION" in str(tables.get(table, ""))

    async def import_rows(self, table: str, rows: list[dict[str, Any]]) -> int:
        """Write exported rows of `table` back (an upsert: importing twice changes nothing;
        `memoryd import` leaves NOT_EXPORTED tables out, `memoryd compact` copies them).
        Declared fields take their declared type; the undeclared ones of schemaless edges
        (`session`, `event_time`) are known by their exported shape."""
        if not rows:
            return 0
        kinds, relation = await self._field_kinds(table)
        tables = set(await self.table_names())

        def restore(field: str, value: Any) -> Any:
            if not isinstance(value, str):
                return value
            kind = kinds.get(field) or (
                "record" if field in _EDGE_REFS else "datetime" if _ISO_UTC.match(value) else None
            )
            ref_table, sep, key = value.partition(":")
            if kind == "record" and sep and ref_table in tables:
                return RecordID(ref_table, key)
            if kind == "datetime":
                return datetime.fromisoformat(value)
            return value

        restored = [
            {
                **{k: restore(k, v) for k, v in row.items() if k != "id"},
                "id": rid(table, row["id"]),
            }
            for row in rows
        ]
        blobs: list[dict[str, Any]] = []
        if table == "memory":
            restored, blobs = split_bodies(restored)
        if relation:
            sql = f"INSERT RELATION INTO {table} $rows ON DUPLICATE KEY UPDATE out = $input.out"
        else:
            sql = f"BEGIN; {INSERT_BLOBS} FOR $r IN $rows {{ UPSERT $r.id CONTENT $r; }}; COMMIT;"
        await self.query(sql, {"rows": restored, "blobs": blobs})
        return len(restored)
