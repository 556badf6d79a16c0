"""Errors a user can act on: the CLI prints the message and exits non-zero, without a traceback;
the MCP server and the hooks turn them into an answer the agent can read.

A job raises one of these; it crosses the queue as a :class:`Failure` value (a user error is an
answer, not a failed job for arq to log and retry) and the client raises it again, of the same
class, so every caller has one error channel: exceptions.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class MemorydError(Exception):
    """A problem with the setup or the input that the user can fix."""


class NotFound(MemorydError):
    """No such session, memory, file or project."""


class InvalidRequest(MemorydError):
    """The request itself is wrong: an unknown kind, a malformed time, an ambiguous prefix."""


class DaemonUnavailable(MemorydError):
    """No memoryd daemon serves the queue (or Redis cannot be reached)."""


# What an agent's process says when no daemon runs (here: the MCP shim has only this module).
NOT_RUNNING = (
    "memoryd is not running: start it with `memoryd service install` (a user service) "
    "or `memoryd run`"
)


class JobFailed(MemorydError):
    """A job failed on the worker for a reason that is not the user's (its message says why)."""


_BY_NAME: dict[str, type[MemorydError]] = {
    cls.__name__: cls for cls in (MemorydError, NotFound, InvalidRequest, DaemonUnavailable)
}


class Failure(NamedTuple):
    """A user error as a job's result: plain data that pickles, whatever the exception held.
    A named tuple, not a dataclass: every hook's process imports this module, and dataclasses
    (with inspect) cost it about 10 ms of a start of about 55 ms."""

    error: str
    message: str

    @classmethod
    def of(cls, exc: MemorydError) -> Failure:
        return cls(type(exc).__name__, str(exc))

    def exception(self) -> MemorydError:
        return _BY_NAME.get(self.error, MemorydError)(self.message)


def value_of(result: Any) -> Any:
    """A query's result, or the user error it carries raised again as its own class."""
    if isinstance(result, Failure):
        raise result.exception()
    return result
