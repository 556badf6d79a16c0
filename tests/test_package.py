"""The distribution as a user installs it: the package list matches the tree, and the built wheel
runs from a fresh environment outside the checkout (the Dockerfile installs that same wheel)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import git_init

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def _packages_in_tree() -> set[str]:
    found = set()
    for top in ("memoryd", "workers"):
        for init in (REPO / top).rglob("__init__.py"):
            found.add(".".join(init.parent.relative_to(REPO).parts))
    # Folders the distribution maps into the package (package-dir).
    for package, folder in PYPROJECT["tool"]["setuptools"]["package-dir"].items():
        assert (REPO / folder / "__init__.py").is_file(), folder
        found.add(package)
    return found


def test_the_package_list_is_every_package_of_the_tree() -> None:
    assert set(PYPROJECT["tool"]["setuptools"]["packages"]) == _packages_in_tree()


def _run(*args: str | Path, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.e2e
def test_the_wheel_installs_and_indexes_and_searches_from_outside_the_checkout(
    tmp_path: Path, short_tmp: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # Built from a copy of what the image copies: an in-tree build would reuse build/, where a
    # module deleted since an earlier build still lies and would ship.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    for folder in ("memoryd", "workers", "schema", "systemd"):
        shutil.copytree(
            REPO / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    dist = tmp_path / "dist"
    _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--quiet",
        "-w",
        dist,
        source,
        cwd=tmp_path,
        env=env,
    )
    (wheel,) = dist.glob("memoryd-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    # Every module of the tree is in the wheel, and the data the package reads at run time.
    for module in [*(REPO / "memoryd").rglob("*.py"), *(REPO / "workers").rglob("*.py")]:
        assert str(module.relative_to(REPO)) in names, module
    settings = PYPROJECT["tool"]["setuptools"]
    for package, patterns in settings["package-data"].items():
        folder = REPO / settings["package-dir"].get(package, package.replace(".", "/"))
        target = package.replace(".", "/")
        data = {
            f"{target}/{f.relative_to(folder).as_posix()}"
            for pattern in patterns
            for f in folder.glob(pattern)
        }
        assert data and data <= names, (package, data - names)

    # A fresh environment that sees the dependencies already installed (a .pth line adds their
    # folder without running its .pth files, so the editable install of the checkout stays out).
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path, env=env)
    python = venv / "bin" / "python"
    site = Path(
        _run(
            python,
            "-c",
            "import sysconfig; print(sysconfig.get_path('purelib'))",
            cwd=tmp_path,
            env=env,
        ).strip()
    )
    (site / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--no-deps",
        "--no-index",
        "--quiet",
        wheel,
        cwd=tmp_path,
        env=env,
    )
    where = _run(
        python, "-c", "import memoryd.store; print(memoryd.store.__file__)", cwd=tmp_path, env=env
    )
    assert Path(where.strip()).is_relative_to(venv)

    memoryd = venv / "bin" / "memoryd"
    assert "index" in _run(memoryd, "--help", cwd=tmp_path, env=env)
    version = PYPROJECT["project"]["version"]
    assert _run(memoryd, "--version", cwd=tmp_path, env=env) == f"memoryd {version}\n"

    repo = tmp_path / "tree"
    repo.mkdir()
    (repo / "billing.py").write_text(
        "def compute_invoice_total(lines):\n    return sum(line.price for line in lines)\n"
    )
    (repo / "mail.py").write_text("def send_welcome_email(user):\n    return f'hi {user}'\n")
    git_init(repo)
    data = short_tmp / "wheel-data"
    totals = json.loads(
        _run(memoryd, "index", repo, "--data-dir", data, "--json", cwd=tmp_path, env=env)
    )
    assert (totals["files"], totals["indexed"], totals["failed"]) == (2, 2, 0)
    hits = json.loads(
        _run(
            memoryd,
            "search",
            "compute_invoice_total",
            "--data-dir",
            data,
            "--json",
            cwd=tmp_path,
            env=env,
        )
    )["results"]
    assert (hits[0]["path"], hits[0]["name"]) == ("billing.py", "compute_invoice_total")


def test_the_image_builds_the_wheel_from_every_folder_the_package_list_names() -> None:
    """No Docker engine here: the Dockerfile is read, not built. Its first stage must copy every
    folder the wheel is made of, and its image must install that wheel (not the source tree)."""
    text = (REPO / "Dockerfile").read_text()
    _, build, image = text.split("\nFROM ")
    copied = {
        part.rstrip("/")
        for line in build.splitlines()
        if line.startswith("COPY ")
        for part in line.split()[1:-1]
    }
    settings = PYPROJECT["tool"]["setuptools"]
    folders = {package.split(".")[0] for package in settings["packages"]} - set(
        settings["package-dir"]
    )
    folders |= set(settings["package-dir"].values())
    assert {"pyproject.toml", "README.md"} | folders <= copied
    assert "pip wheel" in build and "pip install --no-cache-dir /dist/*.whl" in image
