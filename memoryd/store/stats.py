"""memoryd's own numbers over time (schema/030_daily_stats.surql): one row a day, its id the
day, so a second reading the same day replaces the first; rows older than a year go."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from memoryd.store.base import StoreBase, plain, rid

KEPT_DAYS = 365


class StatsQueries(StoreBase):
    async def record_day(
        self, memories: int, chunks: int, database_mb: float | None, jobs: int
    ) -> None:
        today = datetime.now(UTC).date()
        oldest = (today - timedelta(days=KEPT_DAYS)).isoformat()
        await self.query(
            "UPSERT $id CONTENT {day: $day, memories: $memories, chunks: $chunks, "
            "database_mb: $mb, jobs: $jobs}; DELETE daily_stat WHERE day < $oldest;",
            {
                "id": rid("daily_stat", today.isoformat()),
                "day": today.isoformat(),
                "memories": memories,
                "chunks": chunks,
                "mb": database_mb,
                "jobs": jobs,
                "oldest": oldest,
            },
        )

    async def daily_stats(self, days: int) -> list[dict[str, Any]]:
        """The last `days` days' rows, oldest first."""
        since = (datetime.now(UTC).date() - timedelta(days=days)).isoformat()
        rows = (
            await self.query(
                "SELECT day, memories, chunks, database_mb, jobs FROM daily_stat "
                "WHERE day >= $since ORDER BY day",
                {"since": since},
            )
        )[0]
        return [plain(r) for r in rows]
