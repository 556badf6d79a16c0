"""The suite's own scheduling (tests/conftest.py): on two workers, the tests that share a
module-scoped fixture run on one worker, so that the fixture is built once. It was built on
both workers, and again whenever a worker came back to its module, when a pytest release
stopped reading the group suffix xdist writes into test ids; nothing failed, the suite only
took minutes longer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SHARED = """
import os
from pathlib import Path

import pytest

BUILDS = Path(__file__).parent / "builds.txt"


@pytest.fixture(scope="module")
def shared():
    with BUILDS.open("a") as builds:
        builds.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
    return 7


@pytest.mark.parametrize("n", range(8))
def test_uses_the_module_fixture(shared, n):
    assert shared == 7


@pytest.mark.parametrize("n", range(8))
def test_uses_nothing(n):
    assert n < 8
"""


def test_tests_sharing_a_module_fixture_run_on_one_worker_and_build_it_once(
    tmp_path: Path,
) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_collection_modifyitems, pytest_xdist_make_scheduler\n"
        "\n__all__ = ['pytest_collection_modifyitems', 'pytest_xdist_make_scheduler']\n"
    )
    (tmp_path / "test_shared.py").write_text(SHARED)
    # The run's own options (PYTEST_ADDOPTS: plugins of the outer run) are not this run's.
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"} | {"PYTHONPATH": str(ROOT)}
    args = ["-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider", "-q", "-rN"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(tmp_path / "pytest.ini"), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "16 passed" in done.stdout
    # One worker built it, once: all eight of its tests ran there, one after the other.
    assert len((tmp_path / "builds.txt").read_text().splitlines()) == 1
