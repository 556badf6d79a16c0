"""Settings: defaults < TOML config file < MEMORYD_* environment < command-line flags.

`Settings` is a plain dataclass checked here rather than a pydantic model: every command
builds one, and importing pydantic and building the model cost more than half of what a CLI
call through the daemon may take (a 200 ms budget; about 140 ms of CPU measured on 2 cores).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

from memoryd import jobs
from memoryd.errors import MemorydError
from memoryd.hook_events import ACTION_MAX_CHARS as HOOK_ACTION_MAX_CHARS
from memoryd.hook_events import MAX_CHARS as HOOK_MAX_CHARS
from memoryd.hook_events import MAX_CHARS_RANGE as HOOK_MAX_CHARS_RANGE
from memoryd.hook_events import TIMEOUT_SECONDS as HOOK_TIMEOUT_SECONDS
from memoryd.paths import (
    EnvText,
    channel_socket,
    config_file,
    default_data_dir,
    default_transcripts,
    given_settings,
)
from memoryd.vocabulary import DEFAULT_HALF_LIVES

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# Texts per model call. Measured on 2 cores: one at a time is as fast as 32 (no padding to the
# longest text of a batch; 238 source chunks took 13.5 CPU s one by one, 23.0 by 32, for the
# same vectors) and the model's memory arena grows ~38 MB per text of a batch (32: +1.2 GB
# resident, 4: +150 MB, 1: +20 MB).
EMBED_BATCH = 1
# When the workers run each maintenance task, as cron expressions ("off": never on a schedule).
DEFAULT_SCHEDULE = {
    jobs.DECAY.name: "17 * * * *",
    jobs.PRUNE.name: "41 3 * * *",
    jobs.REEMBED.name: "*/5 * * * *",
}
SCHEDULE_OFF = "off"
# Files that hold secrets by their nature, kept out of the index whatever their content
# (gitignore syntax: a pattern with no slash matches the name in any directory; `!` excepts).
DEFAULT_SECRET_FILES = (
    # environment files: .env, .env.local, .env.production, prod.env, direnv's .envrc
    ".env",
    ".env.*",
    "*.env",
    ".envrc",
    # private keys and key stores
    "*.pem",
    "*.key",
    "*.p8",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "*.ppk",
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    # credential files of tools and clouds
    ".netrc",
    "_netrc",
    ".npmrc",
    ".pypirc",
    ".pgpass",
    ".htpasswd",
    ".git-credentials",
    "**/.aws/credentials",
    "credentials.json",
    "client_secret*.json",
    "*service-account*.json",
    "*service_account*.json",
    # Terraform state: the resources' attributes, passwords included, in clear
    "*.tfstate",
    "*.tfstate.backup",
)
# Values a cron field can take (seconds, minutes, hours, days, months, weekdays): a field
# listing all of them is free (`*`), which arq spells None.
_CRON_SIZES = (60, 60, 24, 31, 12, 7)
_CRON_NAMES = ("second", "minute", "hour", "day", "month", "weekday")


def parse_schedule(text: str) -> dict[str, set[int] | None]:
    """A cron expression as the keywords of arq's `cron()`: "minute hour day month weekday"
    (weekday 0 or 7 is Sunday), or six fields with seconds first. As in arq, day and weekday
    must both match when both are given."""
    fields = text.split()
    if len(fields) not in (5, 6):
        raise ValueError(
            f"{text!r}: expected 5 fields (minute hour day month weekday) or 6 (seconds first)"
        )
    seconds = fields.pop(0) if len(fields) == 6 else "0"
    from cron_converter import Cron  # only a configured schedule is parsed: not on every start

    try:
        # Seconds take the minutes' range, so the minute parser reads them.
        [second, *_] = Cron(f"{seconds} * * * *").to_list()
        rest = Cron(" ".join(fields)).to_list()
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None
    parsed: dict[str, set[int] | None] = {}
    for name, size, values in zip(_CRON_NAMES, _CRON_SIZES, [second, *rest], strict=True):
        if name == "weekday":  # arq counts weekdays from Monday = 0, cron from Sunday = 0
            values = [(v - 1) % 7 for v in values]
        parsed[name] = None if len(values) == size else set(values)
    return parsed


def _matches(path: str | Path, patterns: list[str]) -> bool:
    """`path` or a folder above it matches one of the globs."""
    given = Path(path)
    return any(
        fnmatch.fnmatchcase(str(p), pattern)
        for p in (given, *given.parents)
        for pattern in patterns
    )


class InvalidSettings(ValueError):
    """Settings refused: (field, reason) pairs, all of them at once."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{where}: {why}" for where, why in problems))
        self.problems = problems


class _Refused(ValueError):
    """A value that is not of its field's type; `loc`: where inside a list or table."""

    def __init__(self, reason: str, loc: tuple[str | int, ...] = ()) -> None:
        super().__init__(reason)
        self.loc = loc


def _bounded(
    default: Any, *, ge: float | None = None, gt: float | None = None, le: float | None = None
) -> Any:
    """A number field and the bounds `Settings` holds it to."""
    bounds = {name: v for name, v in (("ge", ge), ("gt", gt), ("le", le)) if v is not None}
    return field(default=default, metadata=bounds)


def _check_bounds(value: Any, bounds: Mapping[str, float]) -> None:
    if value is None:
        return
    if "ge" in bounds and not value >= bounds["ge"]:
        raise ValueError(f"Input should be greater than or equal to {bounds['ge']}")
    if "gt" in bounds and not value > bounds["gt"]:
        raise ValueError(f"Input should be greater than {bounds['gt']}")
    if "le" in bounds and not value <= bounds["le"]:
        raise ValueError(f"Input should be less than or equal to {bounds['le']}")


def _structured(kind: Any) -> bool:
    """A list or table type (maybe optional): the environment gives it as JSON."""
    if get_origin(kind) is types.UnionType:
        return any(_structured(arm) for arm in get_args(kind))
    return get_origin(kind) in (list, dict)


def _parse(value: Any, kind: Any) -> Any:
    """`value` as the annotation `kind` of a `Settings` field, or `_Refused` saying why. Text
    from the environment is converted (JSON for lists and tables); the config file's and the
    flags' values must be of the type already, but for numbers that convert without loss
    (3 for 3.0 and back)."""
    if isinstance(value, EnvText) and _structured(kind):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise _Refused("Input should be JSON in the environment (a list or table)") from None
    origin, args = get_origin(kind), get_args(kind)
    if origin is types.UnionType:  # `X | None`, the only union Settings has
        [kind] = [arm for arm in args if arm is not type(None)]
        return None if value is None else _parse(value, kind)
    if origin is list:
        if not isinstance(value, list | tuple):
            raise _Refused("Input should be a valid list")
        return [_within(i, item, args[0]) for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise _Refused("Input should be a valid dictionary")
        return {_within(k, k, args[0]): _within(k, v, args[1]) for k, v in value.items()}
    if origin is Literal:
        if value not in args:
            *others, last = (repr(a) for a in args)
            raise _Refused(f"Input should be {', '.join(others)} or {last}")
        return str(value)
    if kind is bool:
        if not isinstance(value, bool):
            raise _Refused("Input should be a valid boolean")
        return value
    if kind in (int, float):
        return _number(value, kind)
    if kind is Path:
        if not isinstance(value, str | os.PathLike):
            raise _Refused("Input should be a valid path")
        return Path(value)
    if kind is str:
        if not isinstance(value, str):
            raise _Refused("Input should be a valid string")
        return str(value)  # plain text, not EnvText
    raise AssertionError(f"no parser for {kind!r}")


def _within(key: str | int, value: Any, kind: Any) -> Any:
    """A list item or table value, a refusal saying where it is."""
    try:
        return _parse(value, kind)
    except _Refused as exc:
        raise _Refused(str(exc), (key, *exc.loc)) from None


def _number(value: Any, kind: type[int] | type[float]) -> int | float:
    what = "a valid integer" if kind is int else "a valid number"
    if isinstance(value, bool):
        raise _Refused(f"Input should be {what}")
    if isinstance(value, EnvText):
        try:
            return kind(value.strip())
        except ValueError:
            raise _Refused(f"Input should be {what}") from None
    if isinstance(value, int) or (isinstance(value, float) and kind is float):
        return kind(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise _Refused(f"Input should be {what}")


@dataclass
class Settings:
    """Everything configurable, checked and normalised as it is built (`InvalidSettings` says
    what is wrong). `load_settings()` builds it from the config file and the environment."""

    data_dir: Path = field(default_factory=default_data_dir)
    # None: start a private redis-server on a unix socket in the data dir.
    redis_url: str | None = None
    # None: embedded SurrealKV database in the data dir.
    surreal_url: str | None = None
    surreal_user: str | None = None
    surreal_password: str | None = None
    surreal_namespace: str = "memoryd"
    surreal_database: str = "memory"
    # The embedded database keeps what was written through it in memory until it is closed,
    # and stops taking writes once that fills: it is reopened once the process grew by this
    # much, and never later than half its write buffer (memoryd/store/connection.py).
    db_reopen_mb: int = _bounded(96, ge=16)

    model: str = DEFAULT_MODEL
    embed_batch_size: int = _bounded(EMBED_BATCH, ge=1, le=1024)  # EMBED_BATCH says why
    # The CPU budget of background embedding: threads of the model's session (the niced batch
    # thread and embed_cores - 1 workers). One leaves the other cores to queries and the rest
    # of the machine; a query runs on its caller's thread, not counted here.
    embed_cores: int = _bounded(1, ge=1, le=64)

    repos: list[Path] = field(default_factory=list)
    # Transcript folders to watch; unset means the agents' own defaults (default_transcripts).
    transcripts: list[Path] | None = None
    # Which agents' transcripts are followed (an agent not named is followed).
    agents: dict[str, bool] = field(default_factory=dict)
    # What is remembered, as globs of absolute paths (`~` allowed): a path under one matching
    # `exclude` never is (its files are not indexed, sessions started there are not ingested);
    # when `include` is set, only paths under one of its globs are.
    exclude: list[str] = field(default_factory=list)
    include: list[str] = field(default_factory=list)
    # CHANGES_WITH (files changed together) reads the last commits of HEAD: at most this many,
    # none made more than this many days before HEAD's; a commit of more source files than
    # cochange_max_files is a mass change (a rename, a reformat) and counts not at all.
    cochange_commits: int = _bounded(1000, ge=1)
    cochange_days: float = _bounded(365.0, gt=0)
    cochange_max_files: int = _bounded(30, ge=2)
    # Files per index job: large enough to feed the model full batches.
    index_batch_files: int = _bounded(32, ge=1)
    max_file_bytes: int = _bounded(2_000_000, ge=1)
    # A file that chunks into more pieces (one 100k-line function) is skipped with the reason:
    # it would cost minutes of embedding for chunks nobody can read as one result.
    max_file_chunks: int = _bounded(1000, ge=1)
    # Chunks embedded and written per database transaction: a job records its files part by
    # part (a part is whole files), so a slow file never holds the files before it hostage.
    # With chunk_max_chars it also bounds each transaction's bytes.
    index_write_chunks: int = _bounded(256, ge=1)
    chunk_max_chars: int = _bounded(1500, ge=200)
    # Files never indexed (recorded as skipped with the pattern that matched); the secrets of
    # every other file are redacted before they are stored or embedded.
    secret_files: list[str] = field(default_factory=lambda: list(DEFAULT_SECRET_FILES))
    debounce_seconds: float = _bounded(0.3, ge=0)
    job_timeout_seconds: int = _bounded(1800, ge=10)
    # `memoryd index` off a terminal (a log, CI): a progress line this often.
    progress_seconds: float = _bounded(5.0, gt=0)
    # Prometheus endpoint: off unless a port is set (0: any free port). Loopback by default;
    # a container that must be scraped from its network sets metrics_host = "0.0.0.0".
    metrics_port: int | None = _bounded(None, ge=0, le=65535)
    metrics_host: str = "127.0.0.1"
    # Daemon logs: auto = text on a terminal, JSON lines otherwise (journald, launchd, docker).
    log_format: Literal["auto", "human", "json"] = "auto"

    # Maintenance (decay / prune), run by the workers' cron and `memoryd maintenance run`.
    # Importance halves every half-life (days) of a memory's kind since its last access.
    half_life_days: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_HALF_LIVES))
    default_half_life_days: float = _bounded(30.0, gt=0)
    access_boost: float = _bounded(0.2, ge=0)
    # Rows invalid (replaced, deleted) for longer than this are deleted by prune.
    retention_days: float = _bounded(30.0, gt=0)
    # Memories below this importance and not read for prune_idle_days are deleted by prune.
    importance_floor: float = _bounded(0.05, ge=0, le=1)
    prune_idle_days: float = _bounded(60.0, gt=0)
    maintenance_batch: int = _bounded(2000, ge=1)
    # Cron expressions per task; tasks not named keep their default schedule.
    maintenance_schedule: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_SCHEDULE))

    # Agent hooks (memoryd/agent/hooks.py): the most context one hook injects, how long it may take
    # before it gives up and injects nothing, how long a session's record of what was
    # injected is kept after its last use, and the relevance floor of a prompt's context.
    hook_max_chars: int = _bounded(
        HOOK_MAX_CHARS, ge=HOOK_MAX_CHARS_RANGE[0], le=HOOK_MAX_CHARS_RANGE[1]
    )
    # ...and the most one hook about an action injects (before an edit, after a failure).
    hook_action_max_chars: int = _bounded(
        HOOK_ACTION_MAX_CHARS, ge=HOOK_MAX_CHARS_RANGE[0], le=HOOK_MAX_CHARS_RANGE[1]
    )
    hook_timeout_seconds: float = _bounded(HOOK_TIMEOUT_SECONDS, gt=0, le=30)
    hook_state_days: float = _bounded(7.0, gt=0)
    # The relevance (search's score: cosine of prompt and row, 1.0 for a file the prompt names)
    # below which a prompt hook injects nothing.
    hook_min_relevance: float = _bounded(0.3, ge=0, le=1)

    def __post_init__(self) -> None:
        problems: list[tuple[str, str]] = []
        for f in dataclasses.fields(self):
            try:
                value = _parse(getattr(self, f.name), _types()[f.name])
                _check_bounds(value, f.metadata)
                if f.name in _NORMALISE:
                    value = _NORMALISE[f.name](value)
            except _Refused as exc:
                problems.append((".".join(map(str, (f.name, *exc.loc))), str(exc)))
            except ValueError as exc:
                problems.append((f.name, str(exc)))
            else:
                setattr(self, f.name, value)
        if problems:
            raise InvalidSettings(problems)

    def remembers(self, path: str | Path | None) -> bool:
        """Whether memoryd keeps what happens at `path` (a file, a folder, a session's cwd);
        a session with no known folder only when no `include` list narrows what is kept."""
        if path is None:
            return not self.include
        if _matches(path, self.exclude):
            return False
        return not self.include or _matches(path, self.include)

    def follows(self, agent: str) -> bool:
        return self.agents.get(agent, True)

    @property
    def transcript_roots(self) -> list[Path]:
        if self.transcripts is not None:
            return [p.expanduser().resolve() for p in self.transcripts]
        return [root for agent, root in default_transcripts().items() if self.follows(agent)]

    @property
    def embedded_redis(self) -> bool:
        return self.redis_url is None

    @property
    def embedded_db(self) -> bool:
        return self.surreal_url is None or self.surreal_url.startswith(
            ("surrealkv://", "file://", "rocksdb://", "mem://", "memory")
        )

    @property
    def database_url(self) -> str:
        return self.surreal_url or f"surrealkv://{self.data_dir / 'db'}"

    @property
    def redis_socket(self) -> Path:
        return self.data_dir / "redis" / "redis.sock"

    @property
    def channel_socket(self) -> Path:
        return channel_socket(self.data_dir)

    @property
    def queue_url(self) -> str:
        """The Redis the queue lives on: the configured one, or the private one's socket."""
        return self.redis_url or f"unix://{self.redis_socket}"


def _positive_half_lives(value: dict[str, float]) -> dict[str, float]:
    bad = [kind for kind, days in value.items() if days <= 0]
    if bad:
        raise ValueError(f"half-lives must be positive (got {', '.join(bad)})")
    return value


def _valid_schedule(value: dict[str, str]) -> dict[str, str]:
    unknown = sorted(set(value) - set(DEFAULT_SCHEDULE))
    if unknown:
        raise ValueError(
            f"unknown task {', '.join(unknown)}; the tasks are {', '.join(DEFAULT_SCHEDULE)}"
        )
    for task, spec in value.items():
        # The defaults are known to parse; every command builds Settings, and only a
        # configured schedule should cost the cron parser's import.
        if spec not in (SCHEDULE_OFF, DEFAULT_SCHEDULE[task]):
            parse_schedule(spec)
    return {**DEFAULT_SCHEDULE, **value}


def _expand_globs(value: list[str]) -> list[str]:
    return [os.path.expanduser(p).rstrip("/") or "/" for p in value]


def _absolute(value: Path) -> Path:
    return value.expanduser().resolve()


# What a field's value becomes once of its type (or ValueError saying what is wrong with it).
_NORMALISE: dict[str, Callable[[Any], Any]] = {
    "data_dir": _absolute,
    "repos": lambda paths: [_absolute(p) for p in paths],
    "exclude": _expand_globs,
    "include": _expand_globs,
    "half_life_days": _positive_half_lives,
    "maintenance_schedule": _valid_schedule,
}


@cache
def _types() -> dict[str, Any]:
    """Each field's annotation, evaluated (this module's annotations are text)."""
    return get_type_hints(Settings)


def load_settings(**overrides: Any) -> Settings:
    """Build settings from the config file, the environment and `overrides` (the flags; None
    or empty: not given), turning what is wrong into one readable error."""
    given = {k: v for k, v in overrides.items() if v is not None and v != [] and v != ()}
    extra_repos = given.pop("extra_repos", None)
    names = [f.name for f in dataclasses.fields(Settings)]
    try:
        values = {**given_settings(names), **given}
    except (OSError, ValueError) as exc:  # unreadable or malformed TOML
        raise MemorydError(f"cannot read config file {config_file()}: {exc}") from None
    problems = [(key, "Extra inputs are not permitted") for key in values if key not in names]
    try:
        settings = Settings(**{k: v for k, v in values.items() if k in names})
    except InvalidSettings as exc:
        problems += exc.problems
    if problems:
        text = "; ".join(f"{where}: {why}" for where, why in problems)
        raise MemorydError(f"invalid configuration ({config_file()}): {text}")
    if extra_repos:
        merged = list(dict.fromkeys([*settings.repos, *(Path(p).resolve() for p in extra_repos)]))
        settings = dataclasses.replace(settings, repos=merged)
    return settings
