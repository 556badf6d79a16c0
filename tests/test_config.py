"""Settings sources and their precedence; refusing what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from memoryd.config import DEFAULT_MODEL, load_settings
from memoryd.errors import MemorydError
from memoryd.paths import plain_setting


def test_precedence_file_then_environment_then_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "from-file"}"\nchunk_max_chars = 900\nrepos = ["{tmp_path}"]\n'
    )
    monkeypatch.setenv("MEMORYD_CONFIG", str(config))
    settings = load_settings()
    assert settings.data_dir == tmp_path / "from-file"
    assert settings.chunk_max_chars == 900
    assert settings.repos == [tmp_path]
    assert settings.model == DEFAULT_MODEL
    assert settings.embedded_redis and settings.embedded_db

    monkeypatch.setenv("MEMORYD_DATA_DIR", str(tmp_path / "from-env"))
    monkeypatch.setenv("MEMORYD_REDIS_URL", "redis://127.0.0.1:6379/0")
    settings = load_settings()
    assert settings.data_dir == tmp_path / "from-env"
    assert not settings.embedded_redis

    settings = load_settings(data_dir=tmp_path / "from-flag", extra_repos=[tmp_path / "b"])
    assert settings.data_dir == tmp_path / "from-flag"
    assert settings.repos == [tmp_path, tmp_path / "b"]
    assert settings.database_url == f"surrealkv://{tmp_path / 'from-flag' / 'db'}"


def test_default_data_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert load_settings().data_dir == tmp_path / "xdg" / "memoryd"


def test_environment_text_is_parsed_as_its_field_and_lists_and_tables_as_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORYD_REPOS", f'["{tmp_path}"]')
    monkeypatch.setenv("MEMORYD_AGENTS", '{"codex": false}')
    monkeypatch.setenv("MEMORYD_HALF_LIFE_DAYS", '{"error": 2}')
    monkeypatch.setenv("MEMORYD_METRICS_PORT", "9100")
    monkeypatch.setenv("MEMORYD_DEBOUNCE_SECONDS", "0.5")
    monkeypatch.setenv("MEMORYD_LOG_FORMAT", "json")
    monkeypatch.setenv("MEMORYD_NO_SUCH_SETTING", "1")  # not a setting: not read
    settings = load_settings()
    assert settings.repos == [tmp_path]
    assert settings.transcripts == [] and settings.transcript_roots == []
    assert (settings.follows("codex"), settings.follows("gemini")) == (False, True)
    assert settings.half_life_days == {"error": 2.0}
    assert (settings.metrics_port, settings.debounce_seconds) == (9100, 0.5)
    assert settings.log_format == "json"

    monkeypatch.setenv("MEMORYD_REPOS", str(tmp_path))
    monkeypatch.setenv("MEMORYD_METRICS_PORT", "a lot")
    monkeypatch.setenv("MEMORYD_LOG_FORMAT", "xml")
    monkeypatch.setenv("MEMORYD_AGENTS", '{"codex": "no"}')
    with pytest.raises(MemorydError) as raised:
        load_settings()
    assert str(raised.value).split("): ", 1)[1] == (
        "repos: Input should be JSON in the environment (a list or table); "
        "agents.codex: Input should be a valid boolean; "
        "metrics_port: Input should be a valid integer; "
        "log_format: Input should be 'auto', 'human' or 'json'"
    )


def test_the_light_processes_read_a_setting_where_load_settings_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config.toml"
    config.write_text("hook_max_chars = 500\nhook_timeout_seconds = 2.5\n")
    monkeypatch.setenv("MEMORYD_CONFIG", str(config))
    monkeypatch.setenv("MEMORYD_HOOK_TIMEOUT_SECONDS", "0.75")
    assert plain_setting("hook_max_chars") == 500 == load_settings().hook_max_chars
    assert plain_setting("hook_timeout_seconds") == "0.75"
    assert load_settings().hook_timeout_seconds == 0.75
    assert plain_setting("redis_url") is None
    # A malformed file: the light process goes on with the environment (the daemon reports).
    config.write_text("hook_max_chars = [\n")
    assert plain_setting("hook_max_chars") is None
    assert plain_setting("hook_timeout_seconds") == "0.75"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("nonsense_key = 3\n", "nonsense_key: Extra inputs are not permitted"),
        ("chunk_max_chars = 10\n", "chunk_max_chars: Input should be greater than or equal"),
        ("this is not toml [\n", "cannot read config file"),
    ],
)
def test_bad_config_is_refused_with_the_reason(
    text: str, needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(text)
    monkeypatch.setenv("MEMORYD_CONFIG", str(config))
    with pytest.raises(MemorydError) as raised:
        load_settings()
    assert needle in str(raised.value)
    assert str(config) in str(raised.value)


def test_negative_half_life_and_unknown_model_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memoryd.embedding import Embedder

    config = tmp_path / "config.toml"
    config.write_text("[half_life_days]\nerror = -3\n")
    monkeypatch.setenv("MEMORYD_CONFIG", str(config))
    with pytest.raises(MemorydError) as raised:
        load_settings()
    assert "half-lives must be positive (got error)" in str(raised.value)
    with pytest.raises(MemorydError) as unknown:
        Embedder("nobody/no-such-model", tmp_path / "models")
    assert "cannot load embedding model 'nobody/no-such-model'" in str(unknown.value)


def test_the_truncated_model_loads_by_name_and_an_unknown_own_name_is_refused(
    tmp_path: Path,
) -> None:
    import numpy as np

    from memoryd.embedding import TRUNCATED_DIM, TRUNCATED_MODEL, Embedder

    full = Embedder(DEFAULT_MODEL, tmp_path / "models")
    cut = Embedder(TRUNCATED_MODEL, tmp_path / "models")
    assert (full.dim, cut.dim) == (384, TRUNCATED_DIM)
    text = ["RedisSettings.from_dsn parses a redis:// url"]
    [whole], [head] = np.array(full.embed(text)), np.array(cut.embed(text))
    # The first 256 components of the packaged model's vector, back at unit length.
    assert np.allclose(head, whole[:TRUNCATED_DIM] / np.linalg.norm(whole[:TRUNCATED_DIM]))
    assert np.isclose(np.linalg.norm(head), 1.0)
    with pytest.raises(MemorydError) as unknown:
        Embedder("memoryd/all-MiniLM-L6-v2-128", tmp_path / "models")
    assert str(unknown.value) == (
        "unknown embedding model 'memoryd/all-MiniLM-L6-v2-128': memoryd's own offline "
        f"models are {DEFAULT_MODEL}, memoryd/all-MiniLM-L6-v2-cls, {TRUNCATED_MODEL}"
    )
