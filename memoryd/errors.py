"""Errors a user can act on: the CLI prints the message and exits non-zero, without a traceback."""


class MemorydError(Exception):
    """A problem with the setup or the input that the user can fix."""
