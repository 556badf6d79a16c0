"""Shared fixtures: private data dirs, a real source tree nobody here wrote, a running stack."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from memoryd.config import Settings, load_settings
from memoryd.runtime import Runtime

VENV_BIN = Path(sys.executable).parent
MEMORYD = str(VENV_BIN / "memoryd")


def site_package(name: str) -> Path:
    module = __import__(name)
    return Path(module.__file__).parent


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Short path under /tmp: the Redis unix socket path must stay under 108 bytes.
    path = Path(tempfile.mkdtemp(prefix="md-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def isolated_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads the developer's own config file or MEMORYD_* environment."""
    for key in list(os.environ):
        if key.startswith("MEMORYD_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("MEMORYD_CONFIG", str(tmp_path / "no-config.toml"))
    # Never watch the transcripts of whoever runs the tests.
    monkeypatch.setenv("MEMORYD_TRANSCRIPTS", "[]")


def git_init(path: Path) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "import"]):
        subprocess.run(["git", "-C", str(path), *args], check=True, env=env)


@pytest.fixture(scope="session")
def arq_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """arq's installed source, copied and git-initialised: a real tree nobody here wrote."""
    root = tmp_path_factory.mktemp("src") / "arq"
    shutil.copytree(site_package("arq"), root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / ".gitignore").write_text("ignored_dir/\n*.tmp\n")
    (root / "ignored_dir").mkdir()
    (root / "ignored_dir" / "secret.py").write_text("def hidden_function():\n    return 1\n")
    (root / "scratch.tmp").write_text("temporary\n")
    git_init(root)
    return root


def settings_for(data_dir: Path, **extra: object) -> Settings:
    return load_settings(data_dir=data_dir, **extra)


@pytest_asyncio.fixture
async def stack(data_dir: Path) -> AsyncIterator[Runtime]:
    """The embedded defaults, serving in this process: private Redis, SurrealKV, real model."""
    rt = Runtime(settings_for(data_dir))
    try:
        await rt.start_queue(exclusive=True)
        await rt.serve()
        yield rt
    finally:
        await rt.close()
