"""`./dev`, the one entry point for a fresh machine: pip's output stays out of the output of
the command it runs, and an install that fails says so loudly."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # a venv is made: seconds, many on a loaded machine

DEV = Path(__file__).resolve().parent.parent / "dev"


def test_pips_output_goes_to_a_log_and_a_failed_install_shows_it(tmp_path: Path) -> None:
    """pip's setuptools warnings landed in the daemon's output on the first run. A tree whose
    pyproject.toml pip cannot read stands for any failed install (nothing is fetched)."""
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy(DEV, tree / "dev")
    (tree / "pyproject.toml").write_text("[project\n")
    env = {**os.environ, "PYTHON": sys.executable, "PIP_NO_INDEX": "1"}
    done = subprocess.run(
        [str(tree / "dev"), "--help"], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 1
    assert done.stdout == ""
    log = tree / ".venv" / "install.log"
    said = done.stderr.splitlines()
    assert all(line.startswith("dev:") for line in said[:4])
    assert f"dev: the install failed; the end of pip's output ({log}):" in said
    # What pip said is in the log, and its end is shown.
    pip_said = log.read_text().splitlines()
    assert any(line.startswith("ERROR:") for line in pip_said)
    assert said[-len(pip_said[-3:]) :] == pip_said[-3:]
    assert not (tree / ".venv" / ".installed").exists()
