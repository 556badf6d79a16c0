"""Forgetting: the one path that deletes what a user or an agent asked memoryd to forget."""

from __future__ import annotations

from collections.abc import Sequence

from memoryd.store.base import Ref, StoreBase, to_record


class ForgetQueries(StoreBase):
    async def forget_records(self, refs: Sequence[Ref]) -> dict[str, int]:
        """Delete these rows, every edge touching them, the goals drawn from deleted memories,
        and the entities they pointed at that nothing else points at any more (an entity keeps
        the raw forms it was seen as). One transaction. Returns rows deleted per table."""
        if not refs:
            return {}
        rows = await self.query(
            """
            BEGIN;
            LET $goals = SELECT VALUE id FROM goal WHERE memory INSIDE $ids;
            LET $doomed = array::union($ids, $goals);
            LET $targets = array::distinct(array::flatten(
                (SELECT VALUE ->?->entity FROM $doomed)));
            LET $gone = (SELECT VALUE meta::tb(id) FROM $doomed);
            DELETE $doomed;
            LET $orphans = SELECT VALUE id FROM $targets
                WHERE count(<-?) = 0 AND count(->?) = 0;
            DELETE $orphans;
            RETURN array::concat($gone, $orphans.map(|$e| meta::tb($e)));
            COMMIT;
            """,
            {"ids": to_record(list(refs))},
        )
        removed: dict[str, int] = {}
        for table in rows[-2] or []:  # the RETURN (COMMIT is the last statement)
            removed[table] = removed.get(table, 0) + 1
        return removed
