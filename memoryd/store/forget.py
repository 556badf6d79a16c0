"""Forgetting: the one path that deletes what a user or an agent asked memoryd to forget."""

from __future__ import annotations

from collections.abc import Sequence

from memoryd.store.base import Ref, StoreBase, to_record
from memoryd.store.blobs import BODIES_OF_DOOMED, DROP_ORPHAN_BODIES
from memoryd.store.search import BUMP_GENERATION, returned


class ForgetQueries(StoreBase):
    async def forget_records(self, refs: Sequence[Ref]) -> tuple[list[Ref], int]:
        """Delete these rows, every edge touching them, the goals drawn from deleted memories,
        and the entities they pointed at that nothing else points at any more (an entity keeps
        the raw forms it was seen as). One transaction. Returns the rows deleted and the search
        generation after it."""
        result = await self.query(
            f"""
            BEGIN;
            LET $goals = SELECT VALUE id FROM goal WHERE memory INSIDE $ids;
            LET $doomed = array::union($ids, $goals);
            LET $targets = array::distinct(array::flatten(
                (SELECT VALUE ->?->entity FROM $doomed)));
            LET $gone = (SELECT VALUE id FROM $doomed);
            {BODIES_OF_DOOMED}
            DELETE $doomed;
            {DROP_ORPHAN_BODIES}
            LET $orphans = SELECT VALUE id FROM $targets
                WHERE count(<-?) = 0 AND count(->?) = 0;
            DELETE $orphans;
            {BUMP_GENERATION}
            RETURN {{ generation: $generation, gone: array::concat($gone, $orphans) }};
            COMMIT;
            """,
            {"ids": to_record(list(refs))},
        )
        done = returned(result)
        gone = [Ref(r.table_name, str(r.id)) for r in done["gone"] or []]
        return gone, int(done["generation"])
