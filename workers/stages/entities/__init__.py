"""Canonical entities: one real thing (a file, a command, a tool, a URL, an error), one key.

Agents name the same thing in many ways (``./src/a.py``, ``src/../src/a.py``, an absolute path;
``cd x && FOO=1 uv run pytest``; ``mcp__github__create_pr``). Every function here returns an
:class:`Entity` whose ``key`` is canonical and whose ``raw`` keeps the form that was seen, so a
caller can store it as an alias. Pure functions: no file system access unless asked for.
"""

from workers.stages.entities.commands import canonical_commands, command_programs
from workers.stages.entities.errors import ErrorSignature, canonical_error, error_signature
from workers.stages.entities.file_use import (
    NAME,
    READ,
    WRITE,
    FileUse,
    files_in_command,
    guess_home,
)
from workers.stages.entities.model import Entity, Project, ProjectsLike
from workers.stages.entities.paths import as_projects, canonical_file, expand_home, normalize_path
from workers.stages.entities.tools import canonical_tool
from workers.stages.entities.urls import canonical_url

__all__ = [
    "NAME",
    "READ",
    "WRITE",
    "Entity",
    "ErrorSignature",
    "FileUse",
    "Project",
    "ProjectsLike",
    "as_projects",
    "canonical_commands",
    "canonical_error",
    "canonical_file",
    "canonical_tool",
    "canonical_url",
    "command_programs",
    "error_signature",
    "expand_home",
    "files_in_command",
    "guess_home",
    "normalize_path",
]
