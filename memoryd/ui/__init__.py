"""`memoryd ui`: a web page on loopback for what memoryd remembers (memoryd/ui/app.py).

This module is what the daemon loads at start: the query channel's answer, wrapped so that the
`ui` query starts the page. The web stack (starlette, uvicorn) is imported only then: the
default daemon opens no TCP port and loads none of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memoryd.channel import Answer
    from memoryd.ui.app import UiServer

# The channel query that starts the page and answers its URL (not a queue job: only the
# process that holds the channel serves the page).
UI_QUERY = "ui"


class Page:
    """The daemon's page, started at the first `ui` query; `ctx`: the daemon's job context,
    read at each request (a restarted private Redis replaces its connection)."""

    def __init__(self, ctx: dict[str, Any]) -> None:
        self.ctx = ctx
        self.server: UiServer | None = None

    def answering(self, answer: Answer) -> Answer:
        async def with_page(name: str, args: tuple[Any, ...]) -> Any:
            if name != UI_QUERY:
                return await answer(name, args)
            if self.server is None:
                from memoryd.ui.app import UiServer, answering_client

                self.server = UiServer(self.ctx["settings"], lambda: answering_client(self.ctx))
            return await self.server.open(*args)

        return with_page

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()
            self.server = None
