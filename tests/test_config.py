"""Settings sources and their precedence; refusing what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from memoryd.config import DEFAULT_MODEL, load_settings
from memoryd.errors import MemorydError


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
