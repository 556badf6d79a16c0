"""`memoryd service install|uninstall|status`: the systemd user unit and the launchd agent.

The files are rendered from the templates in systemd/ with the paths of this install (the
`memoryd` executable next to the running Python, the data dir and config file in effect), so the
service runs the same memoryd, on the same data, as the shell that installed it. The service
manager (`systemctl --user`, `launchctl`) is called when present; when it is missing or cannot
be reached (no user session bus, a container), the file is still written and the report says
what to run, and where.
"""

from __future__ import annotations

import importlib.resources
import os
import plistlib
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from xml.sax.saxutils import escape as xml_escape

from memoryd.errors import MemorydError

Kind = Literal["systemd", "launchd"]
UNIT_NAME = "memoryd.service"
LABEL = "dev.memoryd"
# systemd >= 253 turns on PrivateUsers= by itself for the filesystem sandbox of user units;
# older user managers ignore or refuse those options, so they are only written from 253 on.
_SANDBOX_SYSTEMD = 253
_PLACEHOLDER = re.compile(r"@([A-Z_]+)@")
_COMMAND_TIMEOUT = 60


# -- what goes into the files ---------------------------------------------------------------


@dataclass(frozen=True)
class ServiceSpec:
    executable: Path
    data_dir: Path
    config_file: Path
    # Filesystem sandbox (read-only system and home, writable data dir, private /tmp).
    sandbox: bool = False
    cpu_quota: int = 150
    # launchd starts agents with a bare PATH; the installing shell's one finds git.
    path_env: str | None = None

    @property
    def environment(self) -> dict[str, str]:
        # Pinned, so the service uses the data and config `memoryd status` showed at install
        # time, whatever XDG_* the service manager's environment has. Secrets are never copied
        # from the shell into the file: they belong in the config file (mode 0600).
        return {"MEMORYD_DATA_DIR": str(self.data_dir), "MEMORYD_CONFIG": str(self.config_file)}

    @property
    def log_file(self) -> Path:
        return self.data_dir / "logs" / "memoryd.log"


def find_executable() -> Path:
    """The `memoryd` of this install: beside the running interpreter (a venv's bin, not
    resolved through its symlink), else the one on PATH."""
    beside = Path(sys.executable).parent / "memoryd"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside.absolute()
    found = shutil.which("memoryd")
    if found:
        return Path(found).absolute()
    raise MemorydError(
        "cannot find the `memoryd` executable (not beside "
        f"{sys.executable} nor on PATH); install memoryd with pip first"
    )


def cpu_quota_percent(cores: int | None) -> int:
    """Three quarters of the machine, never less than one core."""
    return max(100, (cores or 1) * 75)


def userns_available(sysctl: Mapping[str, str | None]) -> bool:
    """Whether an unprivileged user manager may create the user namespace its sandbox needs,
    from the values of the sysctls that can forbid it (None: the kernel has no such knob)."""
    if (sysctl.get("kernel/unprivileged_userns_clone") or "1").strip() == "0":
        return False  # Debian/Ubuntu's switch
    if (sysctl.get("user/max_user_namespaces") or "1").strip() == "0":
        return False
    # Ubuntu 23.10+: unconfined programs get a namespace without capabilities in it.
    return (sysctl.get("kernel/apparmor_restrict_unprivileged_userns") or "0").strip() != "1"


def read_sysctls(names: Sequence[str]) -> dict[str, str | None]:
    values: dict[str, str | None] = {}
    for name in names:
        try:
            values[name] = Path("/proc/sys", name).read_text()
        except OSError:
            values[name] = None
    return values


def parse_systemd_version(text: str) -> int | None:
    """`systemctl --version` prints `systemd 252 (252.38-1~deb12u1)` first."""
    match = re.match(r"\s*systemd (\d+)", text)
    return int(match.group(1)) if match else None


def sandbox_supported(version: int | None, sysctl: Mapping[str, str | None]) -> bool:
    return version is not None and version >= _SANDBOX_SYSTEMD and userns_available(sysctl)


def detect_sandbox() -> bool:
    done = _tool(["systemctl", "--version"])
    version = parse_systemd_version(done.output) if done.ok else None
    names = (
        "kernel/unprivileged_userns_clone",
        "user/max_user_namespaces",
        "kernel/apparmor_restrict_unprivileged_userns",
    )
    return sandbox_supported(version, read_sysctls(names))


def make_spec(
    data_dir: Path, config_file: Path, sandbox: bool | None = None, kind: Kind | None = None
) -> ServiceSpec:
    """The spec for this machine: this install's executable, auto-detected sandbox."""
    kind = kind or platform_kind()
    if sandbox is None:
        sandbox = detect_sandbox() if kind == "systemd" else False
    return ServiceSpec(
        executable=find_executable(),
        data_dir=data_dir,
        config_file=config_file,
        sandbox=sandbox,
        cpu_quota=cpu_quota_percent(os.cpu_count()),
        path_env=os.environ.get("PATH"),
    )


# -- rendering (pure) ------------------------------------------------------------------------


def templates_dir() -> Path:
    """Installed: the package data memoryd.systemd; a checkout: systemd/ at its top."""
    try:
        packaged = Path(str(importlib.resources.files("memoryd.systemd")))
        if (packaged / "memoryd.service.in").is_file():
            return packaged
    except ModuleNotFoundError:
        pass
    checkout = Path(__file__).resolve().parents[2] / "systemd"
    if (checkout / "memoryd.service.in").is_file():
        return checkout
    raise MemorydError("the service templates are missing from this install; reinstall memoryd")


def fill(template: str, values: Mapping[str, str]) -> str:
    """Replace every @NAME@; a placeholder without a value, or a value without a placeholder,
    is a template out of step with this code and fails loudly."""
    used = set(_PLACEHOLDER.findall(template))
    missing, unused = used - set(values), set(values) - used
    if missing or unused:
        raise ValueError(
            f"template placeholders: missing {sorted(missing)}, unused {sorted(unused)}"
        )
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def systemd_word(text: str, literal: bool = False) -> str:
    """One word of a unit file setting: `%` doubled (systemd expands specifiers), quoted when
    it holds spaces, quotes or backslashes. `literal` keeps specifiers such as %h, for the
    checked-in example. A `$` stays as it is: systemd expands variables in the arguments of
    ExecStart=, never in the path of the program it runs, and memoryd passes none with `$`."""
    if "\n" in text or "\r" in text:
        raise MemorydError(f"a path with a line break cannot go in a unit file: {text!r}")
    if not literal:
        text = text.replace("%", "%%")
    if text and not re.search(r"[\s\"'\\;]", text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _sandbox_lines(spec: ServiceSpec, literal: bool) -> str:
    if not spec.sandbox:
        return (
            "# No filesystem sandbox: this user manager cannot set up the user namespace it\n"
            "# needs (systemd < 253, or unprivileged user namespaces are restricted here).\n"
            "# `memoryd service install --sandbox` writes it anyway."
        )
    return "\n".join(
        [
            "# Read-only system and home (transcripts and repositories are only read); the data",
            "# dir is the one place written. systemd runs the sandbox in a user namespace.",
            "ProtectSystem=strict",
            "ProtectHome=read-only",
            f"ReadWritePaths={systemd_word(str(spec.data_dir), literal)}",
            "PrivateTmp=yes",
        ]
    )


def render_unit(spec: ServiceSpec, template: str | None = None, literal: bool = False) -> str:
    template = template if template is not None else read_template("memoryd.service.in")
    environment = "\n".join(
        f"Environment={systemd_word(f'{key}={value}', literal)}"
        for key, value in spec.environment.items()
    )
    return fill(
        template,
        {
            "EXEC": systemd_word(str(spec.executable), literal),
            "ENVIRONMENT": environment,
            "CPU_QUOTA": str(spec.cpu_quota),
            "SANDBOX": _sandbox_lines(spec, literal),
        },
    )


def render_plist(spec: ServiceSpec, template: str | None = None) -> str:
    template = template if template is not None else read_template("memoryd.plist.in")
    env = dict(spec.environment)
    if spec.path_env:
        env["PATH"] = spec.path_env
    entries = "\n".join(
        f"        <key>{xml_escape(k)}</key>\n        <string>{xml_escape(v)}</string>"
        for k, v in env.items()
    )
    return fill(
        template,
        {
            "LABEL": LABEL,
            "EXEC": xml_escape(str(spec.executable)),
            "ENVIRONMENT": entries,
            "LOG_FILE": xml_escape(str(spec.log_file)),
        },
    )


def read_template(name: str) -> str:
    return (templates_dir() / name).read_text()


def example_unit() -> str:
    """systemd/memoryd.service, the unit for copying by hand: specifiers instead of paths."""
    spec = ServiceSpec(
        executable=Path("%h/.local/bin/memoryd"),
        data_dir=Path("%h/.local/share/memoryd"),
        config_file=Path("%h/.config/memoryd/config.toml"),
    )
    return render_unit(spec, literal=True)


# -- where the files go ----------------------------------------------------------------------


def platform_kind() -> Kind:
    if sys.platform == "darwin":
        return "launchd"
    if sys.platform.startswith("linux"):
        return "systemd"
    raise MemorydError(f"no service manager support for {sys.platform}; run `memoryd run` yourself")


def unit_path() -> Path:
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "systemd" / "user" / UNIT_NAME


def plist_path() -> Path:
    return Path.home() / "Library" / "LaunchAgents" / f"{LABEL}.plist"


def service_file(kind: Kind) -> Path:
    return unit_path() if kind == "systemd" else plist_path()


def _write(path: Path, text: str) -> None:
    """Atomically: a service manager reading mid-write must never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(0o644)  # the manager reads it; it holds paths, never secrets
    tmp.replace(path)


# -- talking to the service manager ----------------------------------------------------------


@dataclass(frozen=True)
class ToolResult:
    ok: bool
    output: str
    missing: bool = False  # the program itself is not installed


def _tool(argv: list[str]) -> ToolResult:
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=_COMMAND_TIMEOUT,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError:
        return ToolResult(False, f"{argv[0]}: command not found", missing=True)
    except (OSError, subprocess.SubprocessError) as exc:
        return ToolResult(False, f"{argv[0]}: {exc}")
    return ToolResult(done.returncode == 0, (done.stdout + done.stderr).strip())


def _manager_unreachable(output: str) -> bool:
    # What systemctl says with no user manager: no session bus (ssh without lingering, sudo,
    # containers), or no systemd as init at all.
    signs = ("Failed to connect to bus", "not been booted with systemd", "No medium found")
    return any(sign in output for sign in signs)


@dataclass
class Report:
    """What an install or uninstall did; `ok` is False when the manager step did not happen."""

    path: Path
    ok: bool = True
    lines: list[str] = field(default_factory=list)


def _systemctl_hint(action: str) -> str:
    return (
        "in a login session of this user, run: systemctl --user daemon-reload && "
        f"systemctl --user {action} {UNIT_NAME}"
    )


def _systemctl(report: Report, *commands: list[str]) -> None:
    """Run `systemctl --user …` commands in order, stopping at the first failure."""
    for command in commands:
        done = _tool(["systemctl", "--user", *command])
        if done.ok:
            continue
        report.ok = False
        if done.missing:
            report.lines.append(
                "systemctl is not installed: this machine does not run systemd, so nothing "
                "will start memoryd; run `memoryd run` from your session's startup instead"
            )
        elif _manager_unreachable(done.output):
            report.lines.append(
                f"the systemd user manager is not reachable here ({_first_line(done.output)})"
            )
        else:
            report.lines.append(f"systemctl --user {' '.join(command)} failed: {done.output}")
        return


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "no output"


def _launchctl_domain() -> str:
    return f"gui/{os.getuid()}"


def install(spec: ServiceSpec, kind: Kind, start: bool = True) -> Report:
    """Write the unit or plist for `spec`, then enable and (re)start it."""
    # The sandbox names the data dir as writable: it must exist before the unit starts.
    spec.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    if kind == "systemd":
        return _install_systemd(spec, start)
    return _install_launchd(spec, start)


def _install_systemd(spec: ServiceSpec, start: bool) -> Report:
    path = unit_path()
    _write(path, render_unit(spec))
    report = Report(path, lines=[f"wrote {path} (runs {spec.executable}, data {spec.data_dir})"])
    if not spec.sandbox:
        report.lines.append("filesystem sandbox off (this systemd or kernel cannot set it up)")
    # `restart` rather than `enable --now`: a reinstall must replace a running old version.
    steps = [["daemon-reload"], ["enable", UNIT_NAME]] + ([["restart", UNIT_NAME]] if start else [])
    _systemctl(report, *steps)
    if report.ok:
        report.lines.append(
            f"enabled{' and started' if start else ''} {UNIT_NAME}; "
            "logs: journalctl --user -u memoryd -f"
        )
        if not _lingering():
            report.lines.append(
                "memoryd stops when you log out; to keep it running: loginctl enable-linger $USER"
            )
    else:
        report.lines.append(_systemctl_hint("enable --now" if start else "enable"))
    return report


def _lingering() -> bool:
    user = os.environ.get("USER") or str(os.getuid())
    done = _tool(["loginctl", "show-user", user, "--property=Linger", "--value"])
    return done.ok and done.output.strip() == "yes"


def _install_launchd(spec: ServiceSpec, start: bool) -> Report:
    path = plist_path()
    spec.log_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _write(path, render_plist(spec))
    report = Report(path, lines=[f"wrote {path} (runs {spec.executable}, data {spec.data_dir})"])
    if not start:
        report.lines.append(f"load it with: launchctl bootstrap {_launchctl_domain()} {path}")
        return report
    # A loaded old version must go first, or bootstrap refuses ("service already loaded").
    _tool(["launchctl", "bootout", f"{_launchctl_domain()}/{LABEL}"])
    done = _tool(["launchctl", "bootstrap", _launchctl_domain(), str(path)])
    if done.ok:
        _tool(["launchctl", "enable", f"{_launchctl_domain()}/{LABEL}"])
        report.lines.append(f"loaded and started {LABEL}; logs: {spec.log_file}")
    else:
        report.ok = False
        reason = "launchctl is not available here" if done.missing else done.output
        report.lines.append(f"could not load the agent: {reason}")
        report.lines.append(f"in a macOS login session run: launchctl bootstrap gui/$UID {path}")
    return report


def uninstall(kind: Kind, keep_data: bool = True) -> Report:
    """Stop and disable the service and remove its file (the data dir is the caller's:
    `keep_data` only says what the report tells)."""
    path = service_file(kind)
    report = Report(path)
    if kind == "systemd":
        if path.exists():
            _systemctl(report, ["disable", "--now", UNIT_NAME])
        path.unlink(missing_ok=True)
        if report.ok:
            _systemctl(report, ["daemon-reload"])
        if not report.ok:
            report.lines.append(
                "if a memoryd unit is still running: systemctl --user stop memoryd.service"
            )
    else:
        done = _tool(["launchctl", "bootout", f"{_launchctl_domain()}/{LABEL}"])
        if not done.ok and done.missing:
            report.ok = False
            report.lines.append("launchctl is not available here; nothing was stopped")
        path.unlink(missing_ok=True)
    report.lines.insert(0, f"removed {path}" + ("; the data dir is kept" if keep_data else ""))
    return report


# -- status ----------------------------------------------------------------------------------


@dataclass
class Status:
    kind: Kind
    path: Path
    installed: bool
    executable: Path | None = None  # the one the installed file runs
    current: Path | None = None  # the one this command belongs to
    enabled: str | None = None
    active: str | None = None
    pid: int | None = None
    problem: str | None = None

    @property
    def stale(self) -> bool:
        """The file runs a memoryd that is gone, or another install than this one."""
        return self.installed and (
            self.executable is None
            or not self.executable.exists()
            or (self.current is not None and self.executable != self.current)
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "path": str(self.path),
            "installed": self.installed,
            "executable": str(self.executable) if self.executable else None,
            "current_executable": str(self.current) if self.current else None,
            "stale": self.stale,
            "enabled": self.enabled,
            "active": self.active,
            "pid": self.pid,
            "problem": self.problem,
        }

    def lines(self) -> list[str]:
        if not self.installed:
            return [f"not installed ({self.path} does not exist); run: memoryd service install"]
        out = [f"installed     {self.path}", f"runs          {self.executable}"]
        if self.stale:
            out.append(
                f"stale         this memoryd is {self.current}; run `memoryd service install` "
                "again to point the service at it"
            )
        out.append(f"enabled       {self.enabled or 'unknown'}")
        active = self.active or "unknown"
        out.append(f"state         {active}" + (f" (pid {self.pid})" if self.pid else ""))
        if self.problem:
            out.append(f"note          {self.problem}")
        return out


def unit_executable(text: str) -> Path | None:
    """The program an installed unit's ExecStart= runs (unquoted, specifiers undone)."""
    match = re.search(r"^ExecStart=[-@:+!]*(.+)$", text, re.MULTILINE)
    if not match:
        return None
    try:
        words = shlex.split(match.group(1))
    except ValueError:
        return None
    return Path(words[0].replace("%%", "%")) if words else None


def unit_environment(text: str) -> dict[str, str]:
    """The variables an installed unit's Environment= lines set (unquoted, `%%` undone)."""
    found: dict[str, str] = {}
    for value in re.findall(r"^Environment=(.+)$", text, re.MULTILINE):
        try:
            words = shlex.split(value)
        except ValueError:
            continue
        for word in words:
            key, sep, setting = word.replace("%%", "%").partition("=")
            if sep:
                found[key] = setting
    return found


def pinned_environment(kind: Kind) -> dict[str, str]:
    """The data dir and config file the installed service runs with (MEMORYD_DATA_DIR,
    MEMORYD_CONFIG), as its file pins them; empty when none is installed."""
    path = service_file(kind)
    try:
        if kind == "systemd":
            env = unit_environment(path.read_text())
        else:
            env = plistlib.loads(path.read_bytes()).get("EnvironmentVariables") or {}
    except (OSError, plistlib.InvalidFileException, ValueError, AttributeError):
        return {}
    return {k: str(v) for k, v in env.items() if k in ("MEMORYD_DATA_DIR", "MEMORYD_CONFIG")}


def plist_executable(data: bytes) -> Path | None:
    try:
        args = plistlib.loads(data).get("ProgramArguments") or []
    except (plistlib.InvalidFileException, ValueError, AttributeError):
        return None
    return Path(args[0]) if args else None


def status(kind: Kind) -> Status:
    path = service_file(kind)
    try:
        current: Path | None = find_executable()
    except MemorydError:
        current = None
    if not path.exists():
        return Status(kind, path, installed=False, current=current)
    if kind == "systemd":
        result = Status(kind, path, True, unit_executable(path.read_text()), current)
        _systemd_state(result)
    else:
        result = Status(kind, path, True, plist_executable(path.read_bytes()), current)
        _launchd_state(result)
    return result


def _systemd_state(result: Status) -> None:
    done = _tool(
        ["systemctl", "--user", "show", UNIT_NAME, "--property=UnitFileState,ActiveState,MainPID"]
    )
    if not done.ok:
        result.problem = (
            "systemctl is not installed"
            if done.missing
            else f"the systemd user manager is not reachable ({_first_line(done.output)})"
        )
        return
    props = dict(line.split("=", 1) for line in done.output.splitlines() if "=" in line)
    result.enabled = props.get("UnitFileState") or None
    result.active = props.get("ActiveState") or None
    pid = int(props.get("MainPID") or 0)
    result.pid = pid or None


def _launchd_state(result: Status) -> None:
    done = _tool(["launchctl", "print", f"{_launchctl_domain()}/{LABEL}"])
    if done.missing:
        result.problem = "launchctl is not available here"
        return
    if not done.ok:
        result.enabled, result.active = "not loaded", "inactive"
        return
    result.enabled = "loaded"
    state = re.search(r"^\s*state = (\S+)", done.output, re.MULTILINE)
    pid = re.search(r"^\s*pid = (\d+)", done.output, re.MULTILINE)
    result.active = state.group(1) if state else "unknown"
    result.pid = int(pid.group(1)) if pid else None
