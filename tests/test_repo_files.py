"""The files a new user starts from: README commands, CI entry point, compose file, unit file."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", quick, re.S)


def test_ci_runs_the_readme_test_command() -> None:
    run_cmd, test_cmd = _readme_commands()
    assert run_cmd.startswith("./dev run")
    assert test_cmd == "./dev test"
    ci_lines = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert ci_lines[-1] == test_cmd


def test_compose_file_has_the_server_mode_services() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"redis", "surrealdb", "watcher", "worker"}
    assert "--appendonly" in services["redis"]["command"]
    assert services["worker"]["command"] == ["memoryd", "worker"]
    assert services["worker"]["environment"]["MEMORYD_REDIS_URL"] == "redis://redis:6379/0"
    # No password baked in, and nothing published beyond the compose network.
    assert "${SURREAL_PASSWORD:?" in " ".join(services["surrealdb"]["command"])
    assert all("ports" not in service for service in services.values())
    assert all("healthcheck" in services[name] for name in ("redis", "surrealdb"))


def test_systemd_unit_runs_the_daemon() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(ROOT / "systemd" / "memoryd.service")
    assert unit["Service"]["ExecStart"].endswith("memoryd run")
    assert unit["Service"]["Restart"] == "on-failure"
    assert unit["Install"]["WantedBy"] == "default.target"
