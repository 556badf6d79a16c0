"""Settings: defaults < TOML config file < MEMORYD_* environment < command-line flags."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from memoryd.errors import MemorydError
from memoryd.hook_client import MAX_CHARS as HOOK_MAX_CHARS
from memoryd.hook_client import MAX_CHARS_RANGE as HOOK_MAX_CHARS_RANGE
from memoryd.hook_client import TIMEOUT_SECONDS as HOOK_TIMEOUT_SECONDS
from memoryd.paths import (
    ENV_PREFIX,
    channel_socket,
    config_file,
    default_data_dir,
    default_transcripts,
)
from memoryd.vocabulary import DEFAULT_HALF_LIVES

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# When the workers run each maintenance task, as cron expressions ("off": never on a schedule).
DEFAULT_SCHEDULE = {"decay": "17 * * * *", "prune": "41 3 * * *", "reembed": "*/5 * * * *"}
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


class Settings(BaseSettings):
    """Everything configurable. Unknown keys in the config file are refused."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid")

    data_dir: Path = Field(default_factory=default_data_dir)
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
    db_reopen_mb: int = Field(96, ge=16)

    model: str = DEFAULT_MODEL
    # Texts per model call. Measured on 2 cores: one at a time is as fast as 32 (no padding to
    # the longest text of a batch) and the model's memory arena grows ~38 MB per text of a batch
    # (32: +1.2 GB resident, 4: +150 MB, 1: +20 MB).
    embed_batch_size: int = Field(1, ge=1, le=1024)

    repos: list[Path] = Field(default_factory=list)
    # Transcript folders to watch; unset means the agents' own defaults (default_transcripts).
    transcripts: list[Path] | None = None
    # Which agents' transcripts are followed (an agent not named is followed).
    agents: dict[str, bool] = Field(default_factory=dict)
    # What is remembered, as globs of absolute paths (`~` allowed): a path under one matching
    # `exclude` never is (its files are not indexed, sessions started there are not ingested);
    # when `include` is set, only paths under one of its globs are.
    exclude: list[str] = Field(default_factory=list)
    include: list[str] = Field(default_factory=list)
    # Files per index job: large enough to feed the model full batches.
    index_batch_files: int = Field(32, ge=1)
    max_file_bytes: int = Field(2_000_000, ge=1)
    # A file that chunks into more pieces (one 100k-line function) is skipped with the reason:
    # it would cost minutes of embedding for chunks nobody can read as one result.
    max_file_chunks: int = Field(1000, ge=1)
    # Chunks embedded and written per database transaction: a job records its files part by
    # part (a part is whole files), so a slow file never holds the files before it hostage.
    # With chunk_max_chars it also bounds each transaction's bytes.
    index_write_chunks: int = Field(256, ge=1)
    chunk_max_chars: int = Field(1500, ge=200)
    # Files never indexed (recorded as skipped with the pattern that matched); the secrets of
    # every other file are redacted before they are stored or embedded.
    secret_files: list[str] = Field(default_factory=lambda: list(DEFAULT_SECRET_FILES))
    debounce_seconds: float = Field(0.3, ge=0)
    job_timeout_seconds: int = Field(1800, ge=10)
    # `memoryd index` off a terminal (a log, CI): a progress line this often.
    progress_seconds: float = Field(5.0, gt=0)
    # Prometheus endpoint: off unless a port is set (0: any free port). Loopback by default;
    # a container that must be scraped from its network sets metrics_host = "0.0.0.0".
    metrics_port: int | None = Field(None, ge=0, le=65535)
    metrics_host: str = "127.0.0.1"
    # Daemon logs: auto = text on a terminal, JSON lines otherwise (journald, launchd, docker).
    log_format: Literal["auto", "human", "json"] = "auto"

    # Maintenance (decay / prune), run by the workers' cron and `memoryd maintenance run`.
    # Importance halves every half-life (days) of a memory's kind since its last access.
    half_life_days: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_HALF_LIVES))
    default_half_life_days: float = Field(30.0, gt=0)
    access_boost: float = Field(0.2, ge=0)
    # Rows invalid (replaced, deleted) for longer than this are deleted by prune.
    retention_days: float = Field(30.0, gt=0)
    # Memories below this importance and not read for prune_idle_days are deleted by prune.
    importance_floor: float = Field(0.05, ge=0, le=1)
    prune_idle_days: float = Field(60.0, gt=0)
    maintenance_batch: int = Field(2000, ge=1)
    # Cron expressions per task; tasks not named keep their default schedule.
    maintenance_schedule: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_SCHEDULE))

    # Agent hooks (memoryd/hooks.py): the most context one hook injects, how long it may take
    # before it gives up and injects nothing, and how long a session's record of what was
    # injected is kept after its last use.
    hook_max_chars: int = Field(
        HOOK_MAX_CHARS, ge=HOOK_MAX_CHARS_RANGE[0], le=HOOK_MAX_CHARS_RANGE[1]
    )
    hook_timeout_seconds: float = Field(HOOK_TIMEOUT_SECONDS, gt=0, le=30)
    hook_state_days: float = Field(7.0, gt=0)

    @field_validator("half_life_days", mode="after")
    @classmethod
    def _positive_half_lives(cls, value: dict[str, float]) -> dict[str, float]:
        bad = [kind for kind, days in value.items() if days <= 0]
        if bad:
            raise ValueError(f"half-lives must be positive (got {', '.join(bad)})")
        return value

    @field_validator("maintenance_schedule", mode="after")
    @classmethod
    def _valid_schedule(cls, value: dict[str, str]) -> dict[str, str]:
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

    @field_validator("exclude", "include", mode="after")
    @classmethod
    def _expand_globs(cls, value: list[str]) -> list[str]:
        return [os.path.expanduser(p).rstrip("/") or "/" for p in value]

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

    @field_validator("data_dir", mode="after")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        return value.expanduser().resolve()

    @field_validator("repos", mode="after")
    @classmethod
    def _absolute_repos(cls, value: list[Path]) -> list[Path]:
        return [p.expanduser().resolve() for p in value]

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml = TomlConfigSettingsSource(settings_cls, toml_file=config_file())
        return (init_settings, env_settings, toml)

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


def load_settings(**overrides: Any) -> Settings:
    """Build settings, turning validation problems into one readable error."""
    given = {k: v for k, v in overrides.items() if v is not None and v != [] and v != ()}
    extra_repos = given.pop("extra_repos", None)
    try:
        settings = Settings(**given)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'config'}: {err['msg']}"
            for err in exc.errors()
        )
        raise MemorydError(f"invalid configuration ({config_file()}): {problems}") from None
    except (OSError, ValueError) as exc:  # unreadable or malformed TOML
        raise MemorydError(f"cannot read config file {config_file()}: {exc}") from None
    if extra_repos:
        merged = list(dict.fromkeys([*settings.repos, *(Path(p).resolve() for p in extra_repos)]))
        settings = settings.model_copy(update={"repos": merged})
    return settings
