"""docker-compose.yml against the Compose Specification's JSON schema (vendored in tests/data),
plus what issue 6 asks of the layout that a schema cannot say. Docker is not available here, so
the file is validated, not run."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is a test dependency")

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_FILE = Path(__file__).parent / "data" / "compose-spec.json"
SCHEMA_SHA256 = "d549057ebc2925f39f62799eab0db7b9e2c18b35b6c00595199116da3ed10e64"


@pytest.fixture(scope="module")
def validator() -> Any:
    raw = SCHEMA_FILE.read_bytes()
    assert hashlib.sha256(raw).hexdigest() == SCHEMA_SHA256, "tests/data/README.md says where from"
    schema = json.loads(raw)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def problems(validator: Any, doc: dict[str, Any]) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
        for e in validator.iter_errors(doc)
    ]


def test_compose_file_follows_the_compose_specification(
    validator: Any, compose: dict[str, Any]
) -> None:
    assert problems(validator, compose) == []


def test_the_schema_check_has_teeth(validator: Any, compose: dict[str, Any]) -> None:
    typo = copy.deepcopy(compose)
    typo["services"]["worker"]["helthcheck"] = {"test": ["CMD", "true"]}
    assert any("helthcheck" in p for p in problems(validator, typo))
    wrong_type = copy.deepcopy(compose)
    wrong_type["services"]["redis"]["depends_on"] = 3
    assert any(p.startswith("services/redis/depends_on") for p in problems(validator, wrong_type))


def test_services_of_the_server_mode_layout(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"redis", "surrealdb", "watcher", "worker"} <= set(services)
    # Queued jobs survive a Redis restart.
    assert "--appendonly yes" in " ".join(services["redis"]["command"])
    assert re.search(r":v?3", services["surrealdb"]["image"])  # SurrealDB 3
    assert any("surrealkv" in part for part in services["surrealdb"]["command"])
    assert services["watcher"]["command"][-1] == "watch"
    assert services["worker"]["command"][-1] == "worker"


def test_nothing_is_published_beyond_the_compose_network(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        assert "ports" not in svc, f"{name} publishes ports; the user should opt into that"
        assert svc.get("network_mode") != "host", name


def test_worker_scales(compose: dict[str, Any]) -> None:
    """`docker compose up --scale worker=N` refuses a fixed container name or host port."""
    worker = compose["services"]["worker"]
    assert "container_name" not in worker and "ports" not in worker
    assert worker["depends_on"]["redis"]["condition"] == "service_healthy"
    assert worker["depends_on"]["surrealdb"]["condition"] == "service_healthy"


def test_no_password_is_baked_in(compose: dict[str, Any]) -> None:
    """Every use of the SurrealDB password comes from the environment, and is required."""
    text = (ROOT / "docker-compose.yml").read_text()
    uses = re.findall(r"\$\{SURREAL_PASSWORD([^}]*)\}", text)
    assert uses, "the compose file should take the password from SURREAL_PASSWORD"
    assert all(use.startswith((":?", "?")) for use in uses), uses  # no `:-default`
    command = compose["services"]["surrealdb"]["command"]
    assert command[command.index("--pass") + 1].startswith("${SURREAL_PASSWORD")
    for name in ("watcher", "worker"):
        env = compose["services"][name].get("environment", {})
        password = env.get("MEMORYD_SURREAL_PASSWORD", "${")
        assert password.startswith("${SURREAL_PASSWORD"), name


def test_repositories_are_mounted_read_only(compose: dict[str, Any]) -> None:
    for name in ("watcher", "worker"):
        for volume in compose["services"][name].get("volumes", []):
            if (
                isinstance(volume, str)
                and ":" in volume
                and volume.split(":")[0].startswith(("/", ".", "$"))
            ):
                assert volume.endswith(":ro"), f"{name}: {volume} should be read-only"


def test_every_service_has_a_healthcheck(compose: dict[str, Any]) -> None:
    missing = [n for n, svc in compose["services"].items() if "healthcheck" not in svc]
    assert missing == []


def test_watcher_mounts_transcript_folders(compose: dict[str, Any]) -> None:
    watcher = compose["services"]["watcher"]
    mounts = " ".join(v for v in watcher.get("volumes", []) if isinstance(v, str))
    assert ".claude" in mounts and ".codex" in mounts
    assert "MEMORYD_TRANSCRIPTS" in watcher.get("environment", {})
