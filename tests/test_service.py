"""`memoryd service`: the generated systemd unit and launchd plist, and installing them.

The unit is checked by `systemd-analyze --user verify` (it fails on a command that is not
executable, and warns on any unknown setting) and parsed; the plist by plistlib. Paths with
spaces, quotes, `%`, `$` and `&` show that quoting and escaping hold.
"""

from __future__ import annotations

import json
import os
import plistlib
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from memoryd.cli import service_manager
from memoryd.cli.service_manager import ServiceSpec
from memoryd.errors import MemorydError
from tests.conftest import wait_daemon
from tests.fixtures import SMALL

ROOT = Path(__file__).resolve().parents[1]
MEMORYD = Path(sys.executable).parent / "memoryd"
ANALYZE = shutil.which("systemd-analyze")


def unit_settings(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) in order; systemd allows a key more than once."""
    section, found = "", []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        found.append((section, key, value))
    return found


def values(text: str, key: str) -> list[str]:
    return [v for _, k, v in unit_settings(text) if k == key]


@pytest.fixture
def odd_paths(tmp_path: Path) -> ServiceSpec:
    """This install's real memoryd, reached through a directory name systemd must be told
    about carefully, and a data dir and config file with spaces and quotes."""
    bin_dir = tmp_path / "my bin %i $HOME"
    bin_dir.mkdir()
    (bin_dir / "memoryd").symlink_to(MEMORYD)
    data = tmp_path / "data dir"
    data.mkdir()
    return ServiceSpec(
        executable=bin_dir / "memoryd",
        data_dir=data,
        config_file=tmp_path / 'conf "x" & <y>.toml',
        cpu_quota=300,
    )


def verify(unit: Path) -> subprocess.CompletedProcess[str]:
    runtime = unit.parent / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    # A user-mode check needs a runtime dir even when no user manager runs here.
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    return subprocess.run(
        [ANALYZE or "systemd-analyze", "--user", "verify", str(unit)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.skipif(
    ANALYZE is None, reason="systemd-analyze is not installed (apt install systemd)"
)
@pytest.mark.parametrize("sandbox", [False, True])
def test_generated_unit_passes_systemd_analyze_verify(
    odd_paths: ServiceSpec, tmp_path: Path, sandbox: bool
) -> None:
    spec = ServiceSpec(**{**odd_paths.__dict__, "sandbox": sandbox})
    unit = tmp_path / "memoryd.service"
    unit.write_text(service_manager.render_unit(spec))
    done = verify(unit)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr  # no unknown or misspelt setting either

    # The check has teeth: a unit pointing at a missing memoryd is refused.
    broken = ServiceSpec(**{**spec.__dict__, "executable": tmp_path / "gone" / "memoryd"})
    unit.write_text(service_manager.render_unit(broken))
    refused = verify(unit)
    assert refused.returncode != 0 and "is not executable" in refused.stderr


def test_generated_unit_says_what_the_issue_asks(odd_paths: ServiceSpec) -> None:
    text = service_manager.render_unit(odd_paths)
    settings = unit_settings(text)
    assert ("Service", "Type", "exec") in settings
    assert ("Service", "Restart", "on-failure") in settings
    # memoryd stops its own redis-server after the worker: only it gets SIGTERM.
    assert ("Service", "KillMode", "mixed") in settings
    assert ("Service", "MemoryMax", "2G") in settings
    assert ("Service", "CPUQuota", "300%") in settings
    assert ("Service", "UMask", "0077") in settings
    assert ("Service", "NoNewPrivileges", "yes") in settings
    assert ("Install", "WantedBy", "default.target") in settings

    # Unquoted and with specifiers undone, the command is the real executable + "run".
    (exec_start,) = values(text, "ExecStart")
    words = [w.replace("%%", "%") for w in shlex.split(exec_start)]
    assert words == [str(odd_paths.executable), "run"]
    assert service_manager.unit_executable(text) == odd_paths.executable
    env = dict(
        shlex.split(v)[0].replace("%%", "%").split("=", 1) for v in values(text, "Environment")
    )
    assert env == {
        "MEMORYD_DATA_DIR": str(odd_paths.data_dir),
        "MEMORYD_CONFIG": str(odd_paths.config_file),
    }
    # Without the sandbox nothing needs a user namespace; with it, the data dir is writable.
    assert values(text, "ProtectSystem") == []
    sandboxed = service_manager.render_unit(ServiceSpec(**{**odd_paths.__dict__, "sandbox": True}))
    assert values(sandboxed, "ProtectSystem") == ["strict"]
    assert values(sandboxed, "ProtectHome") == ["read-only"]
    (writable,) = values(sandboxed, "ReadWritePaths")
    assert shlex.split(writable) == [str(odd_paths.data_dir)]


def test_checked_in_unit_is_the_template_rendered() -> None:
    """systemd/memoryd.service (for copying by hand) never drifts from the template."""
    shipped = (ROOT / "systemd" / "memoryd.service").read_text()
    assert shipped == service_manager.example_unit()
    assert values(shipped, "ExecStart") == ["%h/.local/bin/memoryd run"]


def test_generated_plist_parses_with_the_exact_paths(odd_paths: ServiceSpec) -> None:
    spec = ServiceSpec(**{**odd_paths.__dict__, "path_env": "/opt/homebrew/bin:/usr/bin"})
    doc = plistlib.loads(service_manager.render_plist(spec).encode())
    assert doc["Label"] == service_manager.LABEL
    assert doc["ProgramArguments"] == [str(spec.executable), "run"]
    assert doc["EnvironmentVariables"] == {
        "MEMORYD_DATA_DIR": str(spec.data_dir),
        "MEMORYD_CONFIG": str(spec.config_file),  # quotes, & and <> survived the XML
        "PATH": "/opt/homebrew/bin:/usr/bin",
    }
    assert doc["RunAtLoad"] is True
    assert doc["KeepAlive"] == {"SuccessfulExit": False}
    assert doc["ProcessType"] == "Background"
    assert doc["Umask"] == 0o077
    assert doc["StandardErrorPath"] == str(spec.data_dir / "logs" / "memoryd.log")
    assert (
        service_manager.plist_executable(service_manager.render_plist(spec).encode())
        == spec.executable
    )


def test_templates_and_their_values_stay_in_step() -> None:
    assert service_manager.fill("a @X@ b", {"X": "1"}) == "a 1 b"
    with pytest.raises(ValueError, match=r"missing \['Y'\]"):
        service_manager.fill("@X@ @Y@", {"X": "1"})
    with pytest.raises(ValueError, match=r"unused \['Z'\]"):
        service_manager.fill("@X@", {"X": "1", "Z": "2"})


def test_systemd_words() -> None:
    assert service_manager.systemd_word("/usr/bin/memoryd") == "/usr/bin/memoryd"
    assert service_manager.systemd_word("/a b/c") == '"/a b/c"'
    assert service_manager.systemd_word("/50%/x") == "/50%%/x"
    assert service_manager.systemd_word('/q"\\') == '"/q\\"\\\\"'
    assert service_manager.systemd_word("%h/bin", literal=True) == "%h/bin"
    with pytest.raises(MemorydError, match="line break"):
        service_manager.systemd_word("/a\nb")


def test_sandbox_only_where_the_user_manager_can_build_it() -> None:
    assert service_manager.parse_systemd_version("systemd 252 (252.38-1~deb12u1)\n+PAM") == 252
    assert service_manager.parse_systemd_version("garbage") is None
    open_kernel = {"kernel/unprivileged_userns_clone": None, "user/max_user_namespaces": "63000\n"}
    assert service_manager.sandbox_supported(255, open_kernel)
    assert not service_manager.sandbox_supported(252, open_kernel)  # before implicit PrivateUsers=
    assert not service_manager.sandbox_supported(None, open_kernel)
    assert not service_manager.sandbox_supported(255, {"kernel/unprivileged_userns_clone": "0\n"})
    assert not service_manager.sandbox_supported(255, {"user/max_user_namespaces": "0"})
    ubuntu = {"kernel/apparmor_restrict_unprivileged_userns": "1\n"}
    assert not service_manager.sandbox_supported(256, ubuntu)
    assert service_manager.cpu_quota_percent(2) == 150
    assert service_manager.cpu_quota_percent(1) == 100
    assert service_manager.cpu_quota_percent(None) == 100


def test_spec_uses_this_install(tmp_path: Path) -> None:
    spec = service_manager.make_spec(
        tmp_path / "d", tmp_path / "c.toml", sandbox=False, kind="systemd"
    )
    assert spec.executable == MEMORYD.absolute()
    assert os.access(spec.executable, os.X_OK)
    assert spec.environment["MEMORYD_DATA_DIR"] == str(tmp_path / "d")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return home


def _no_managers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH with git and friends but without systemctl, launchctl or loginctl."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git", "sh"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))


def test_install_status_uninstall_without_systemctl(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_managers(tmp_path, monkeypatch)
    spec = ServiceSpec(MEMORYD.absolute(), tmp_path / "data", tmp_path / "c.toml")
    report = service_manager.install(spec, "systemd")
    unit = home / ".config" / "systemd" / "user" / "memoryd.service"
    assert report.path == unit and unit.read_text() == service_manager.render_unit(spec)
    assert (unit.stat().st_mode & 0o777) == 0o644
    assert spec.data_dir.is_dir()  # the sandbox's writable path must exist before a start
    assert not report.ok
    said = "\n".join(report.lines)
    assert f"wrote {unit}" in said
    assert "systemctl is not installed" in said
    assert "systemctl --user enable --now memoryd.service" in said

    state = service_manager.status("systemd")
    assert state.installed and state.executable == MEMORYD.absolute() and not state.stale
    assert state.problem == "systemctl is not installed"
    assert any(line.startswith("installed") for line in state.lines())

    # A unit left pointing at an install that is gone says so.
    unit.write_text(
        service_manager.render_unit(
            ServiceSpec(tmp_path / "old" / "memoryd", spec.data_dir, spec.config_file)
        )
    )
    assert service_manager.status("systemd").stale

    removed = service_manager.uninstall("systemd")
    assert not unit.exists() and f"removed {unit}" in removed.lines[0]
    assert not service_manager.status("systemd").installed
    assert spec.data_dir.is_dir()  # data is never removed


def _files(root: Path, *leave_out: Path) -> dict[str, bytes]:
    """Every file under `root` but those under `leave_out`, with its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not any(p.is_relative_to(out) for out in leave_out)
    }


def _uninstall_purge(*extra: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MEMORYD), "service", "uninstall", "--purge", *extra],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.e2e
def test_purge_removes_every_file_memoryd_keeps_and_nothing_else(
    home: Path, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A service installed, a real daemon that ingested and searched a transcript, logging
    to the data dir as launchd's plist has it. A purge is refused while the daemon runs, while
    the data dir holds a file memoryd did not make, and when not confirmed; then it removes the
    data dir (database, search index, queue, sockets, logs), the config file and the unit, and
    not one other file of the home or beside the data dir."""
    _no_managers(tmp_path, monkeypatch)
    monkeypatch.delenv("MEMORYD_CONFIG")  # the config file at its default place in the home
    data = data_dir / "memoryd"
    config = home / ".config" / "memoryd" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f"data_dir = {json.dumps(str(data))}\n")
    unit = home / ".config" / "systemd" / "user" / "memoryd.service"
    neighbours = {
        home / ".config" / "systemd" / "user" / "other.service": b"[Service]\n",
        home / ".config" / "other" / "settings.toml": b"x = 1\n",
        data_dir / "beside.txt": b"not memoryd's\n",
    }
    for path, text in neighbours.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text)
    transcript = tmp_path / SMALL.name
    shutil.copy(SMALL, transcript)
    for var in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME"):  # the clients' files
        monkeypatch.delenv(var, raising=False)  # in this home, never the developer's
    integrated = subprocess.run([str(MEMORYD), "integrate", "claude-code"], capture_output=True)
    assert integrated.returncode == 0 and (home / ".claude" / "settings.json").is_file()
    installed = subprocess.run(
        [str(MEMORYD), "service", "install", "--no-start"], capture_output=True, text=True
    )
    assert installed.returncode == 1 and unit.is_file()  # written; no systemctl to enable it
    log_file = ServiceSpec(MEMORYD, data, config).log_file
    log_file.parent.mkdir(mode=0o700)
    with log_file.open("w") as log:
        daemon = subprocess.Popen([str(MEMORYD), "run", "--log-format", "json"], stderr=log)
    try:
        wait_daemon(data, lambda info: info["daemon_running"])
        cli_env = ("--data-dir", str(data))
        ingested = subprocess.run(
            [str(MEMORYD), "ingest", str(transcript), *cli_env, "--json"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert json.loads(ingested.stdout)["reports"][0]["memories"] == 22
        found = subprocess.run(
            [str(MEMORYD), "search", "Summarize the findings", "--kind", "memory", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert json.loads(found.stdout)["results"]
        kept = {"db", "memoryd.sock", "memoryd.lock", "redis", "search", "logs", "models"}
        assert kept <= {p.name for p in data.iterdir()}
        assert (data / "redis" / "appendonly.aof").is_file() and any((data / "search").rglob("*"))

        running = _uninstall_purge("--yes")
        assert running.returncode == 1 and "a memoryd daemon still uses" in running.stderr
        assert f"removed {unit}" in running.stderr  # the service goes first: it stops the daemon
        assert kept <= {p.name for p in data.iterdir()} and config.is_file()
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=120)
    assert daemon.returncode == 0
    assert b'"memoryd stopped"' in log_file.read_bytes()
    outside = _files(home, config, unit) | _files(data_dir, data)
    before = _files(data)

    (data / "notes.txt").write_text("mine")
    foreign = _uninstall_purge("--yes")
    assert foreign.returncode == 1 and "did not create (notes.txt)" in foreign.stderr
    (data / "notes.txt").unlink()
    declined = _uninstall_purge(stdin="n\n")
    assert declined.returncode == 1 and "nothing deleted" in declined.stderr
    assert str(data) in declined.stdout and str(config) in declined.stdout  # what it asked about
    assert _files(data) == before and config.is_file()

    purged = _uninstall_purge("--yes")
    assert f"removed {data}\n" in purged.stderr and f"removed {config}\n" in purged.stderr
    # The exit code still says that systemctl was missing to reload the user manager.
    assert purged.returncode == 1 and "systemctl is not installed" in purged.stderr
    assert not data.exists() and not config.parent.exists() and not unit.exists()
    hint = "claude-code still runs memoryd's hooks or MCP server: memoryd integrate claude-code"
    assert hint in purged.stderr and "codex still" not in purged.stderr
    assert _files(home) | _files(data_dir) == outside
    assert transcript.read_bytes() == SMALL.read_bytes()


def test_purge_takes_the_data_dir_and_config_the_service_runs_with(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A data dir given to `service install` is pinned in the unit, not in the config: the
    purge removes it and the unit's config file, not those this shell would use."""
    _no_managers(tmp_path, monkeypatch)
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "share"))
    pinned, installed = tmp_path / "my data 50%", tmp_path / "installed config.toml"
    shell_data, shell_config = home / "share" / "memoryd", tmp_path / "shell.toml"
    for data in (pinned, shell_data):
        (data / "db").mkdir(parents=True)
        (data / "db" / "000001.vlog").write_bytes(b"memories")
    for config in (installed, shell_config):
        config.write_text('log_format = "json"\n')
    monkeypatch.setenv("MEMORYD_CONFIG", str(installed))
    install = [str(MEMORYD), "service", "install", "--no-start", "--data-dir", str(pinned)]
    subprocess.run(install, capture_output=True, timeout=120)
    assert service_manager.pinned_environment("systemd") == {
        "MEMORYD_DATA_DIR": str(pinned),
        "MEMORYD_CONFIG": str(installed),
    }
    monkeypatch.setenv("MEMORYD_CONFIG", str(shell_config))
    purged = _uninstall_purge("--yes")
    assert f"removed {pinned}\n" in purged.stderr and f"removed {installed}\n" in purged.stderr
    assert not pinned.exists() and not installed.exists()
    assert (shell_data / "db" / "000001.vlog").read_bytes() == b"memories"
    assert shell_config.read_text() == 'log_format = "json"\n'


def test_purge_says_what_it_cannot_reach(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An external database and Redis are named, not removed, and the exit code says so."""
    _no_managers(tmp_path, monkeypatch)
    config = tmp_path / "memoryd.toml"
    config.write_text(
        'surreal_url = "ws://127.0.0.1:9/rpc"\nredis_url = "redis://127.0.0.1:9"\n'
        f"data_dir = {json.dumps(str(tmp_path / 'data'))}\n"
    )
    monkeypatch.setenv("MEMORYD_CONFIG", str(config))
    purged = _uninstall_purge("--yes")
    assert purged.returncode == 1 and f"removed {config}" in purged.stderr
    assert not config.exists() and tmp_path.is_dir()
    said = " ".join(purged.stderr.split())  # rich wraps long lines
    assert (
        "the database at ws://127.0.0.1:9/rpc (namespace memoryd, database memory) is not" in said
    )
    assert "the queue on redis://127.0.0.1:9 keeps memoryd's jobs" in said


def test_unreachable_user_manager_is_explained(home: Path, tmp_path: Path) -> None:
    if shutil.which("systemctl") is None:
        pytest.skip("systemctl is not installed here")
    probe = subprocess.run(
        ["systemctl", "--user", "show-environment"], capture_output=True, text=True, timeout=30
    )
    if not service_manager._manager_unreachable(probe.stdout + probe.stderr):
        pytest.skip("a systemd user manager runs here: not installing into a real session")
    spec = ServiceSpec(MEMORYD.absolute(), tmp_path / "data", tmp_path / "c.toml")
    report = service_manager.install(spec, "systemd")
    said = "\n".join(report.lines)
    assert not report.ok and report.path.exists()
    assert "the systemd user manager is not reachable here" in said
    assert "in a login session of this user, run:" in said
    assert "not reachable" in (service_manager.status("systemd").problem or "")
    service_manager.uninstall("systemd")
    assert not report.path.exists()


def test_launchd_agent_install_without_launchctl(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_managers(tmp_path, monkeypatch)
    spec = ServiceSpec(MEMORYD.absolute(), tmp_path / "data", tmp_path / "c.toml")
    report = service_manager.install(spec, "launchd")
    plist = home / "Library" / "LaunchAgents" / f"{service_manager.LABEL}.plist"
    assert report.path == plist and not report.ok
    assert "launchctl is not available here" in "\n".join(report.lines)
    assert plistlib.loads(plist.read_bytes())["ProgramArguments"] == [
        str(MEMORYD.absolute()),
        "run",
    ]
    assert (spec.data_dir / "logs").is_dir()  # launchd does not create the log's folder
    assert service_manager.pinned_environment("launchd") == spec.environment

    state = service_manager.status("launchd")
    assert (
        state.installed and not state.stale and state.problem == "launchctl is not available here"
    )
    service_manager.uninstall("launchd")
    assert not plist.exists()
