"""Real agent clients for tests: installed from npm once, driven by a scripted model server.

Shared by every test that needs a real Claude Code, Codex or Gemini CLI (MCP, hooks, live
transcripts). The clients install into `.clients/` at the top of the repo (git ignores it)
and are reused while their versions match the pins below. `ScriptedAnthropic` (Messages API,
for Claude Code) and `ScriptedOpenAI` (Responses API, for Codex) are small servers on
127.0.0.1 that answer from a script of canned turns and record every request body;
`ScriptedGemini` (Gemini API) likewise for Gemini CLI; `ClaudeHome`, `CodexHome` and
`GeminiHome` run the real clients in an isolated home against them.
docs/clients.md records what these clients were verified to do.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

import pytest

REPO = Path(__file__).resolve().parent.parent
CLIENTS_DIR = REPO / ".clients"

# Versions whose behaviour docs/clients.md records; bump them together with that file.
CLAUDE_CODE = ("@anthropic-ai/claude-code", "2.1.330")
CODEX = ("@openai/codex", "0.169.0")
GEMINI_CLI = ("@google/gemini-cli", "0.61.0")
PINNED = (CLAUDE_CODE, CODEX, GEMINI_CLI)

Json = dict[str, Any]


@dataclass(frozen=True)
class Clients:
    claude: Path
    codex: Path
    gemini: Path


def _installed_version(package: str) -> str | None:
    manifest = CLIENTS_DIR / "node_modules" / package / "package.json"
    try:
        return json.loads(manifest.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def install_clients() -> Clients:
    """The three CLIs at their pinned versions, installed with npm on first use.

    Skips the calling test when node or npm is missing: the one reason a client test may skip.
    """
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not on PATH: the real agent clients install with npm")
    CLIENTS_DIR.mkdir(exist_ok=True)
    # Two pytest processes may start at once: one installs, the other waits for it.
    with open(CLIENTS_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        wanted = [f"{name}@{version}" for name, version in PINNED]
        if any(_installed_version(name) != version for name, version in PINNED):
            npm = ["npm", "install", "--prefix", str(CLIENTS_DIR), "--no-audit", "--no-fund"]
            done = subprocess.run(
                [*npm, "--no-save", *wanted], capture_output=True, text=True, timeout=600
            )
            if done.returncode != 0:
                raise RuntimeError(f"npm install {' '.join(wanted)} failed:\n{done.stderr[-4000:]}")
    bin_dir = CLIENTS_DIR / "node_modules" / ".bin"
    return Clients(claude=bin_dir / "claude", codex=bin_dir / "codex", gemini=bin_dir / "gemini")


# --- scripted model servers ----------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One canned assistant message: text, or a call of the named tool with the given input.

    `when` picks the requests this turn may answer; by default any main-loop request (one that
    lists tools and may answer with more than one token). Turns answer in order: a request gets
    the first unused turn whose `when` accepts it.
    """

    text: str | None = None
    tool: str | None = None
    input: Json = field(default_factory=dict)
    when: Callable[[Json], bool] | None = None

    def accepts(self, body: Json) -> bool:
        if self.when is not None:
            return self.when(body)
        return is_main_loop(body)


def text(value: str, when: Callable[[Json], bool] | None = None) -> Turn:
    return Turn(text=value, when=when)


def tool_use(name: str, input: Json, when: Callable[[Json], bool] | None = None) -> Turn:
    return Turn(tool=name, input=input, when=when)


def is_main_loop(body: Json) -> bool:
    # Claude Code's own side requests (title, quota check with max_tokens 1, topic) list no tools.
    limit = body.get("max_tokens", body.get("max_output_tokens"))
    return bool(body.get("tools")) and (limit is None or int(limit) > 1)


def tool_names(body: Json) -> list[str]:
    """The tools a request offers. Codex groups MCP tools in namespaces: those read `NS__name`,
    the same name a `tool_use` turn gives to call one (`mcp__echo__echo`)."""
    names = []
    for tool in body.get("tools") or []:
        if tool.get("type") == "namespace":
            names += [f"{tool['name']}__{inner['name']}" for inner in tool.get("tools") or []]
        elif "functionDeclarations" in tool:  # Gemini
            names += [declared["name"] for declared in tool["functionDeclarations"]]
        elif "name" in tool:
            names.append(tool["name"])
    return names


def request_text(body: Json) -> str:
    """Every text a request carries (system prompt, messages, tool results) as one string."""
    # The Messages API's fields, the Responses API's, then Gemini's.
    keys = ("system", "messages", "instructions", "input", "systemInstruction", "contents")
    return json.dumps({key: body.get(key) for key in keys})


def tool_results(body: Json) -> list[Json]:
    """The tool_result blocks in a request's messages, in order."""
    return [
        block
        for message in body.get("messages") or []
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


def tool_search_outputs(body: Json) -> list[Json]:
    """The tool_search_output items of a Responses-API request: what Codex's own search over
    its deferred tools found (`tools`: namespaces of MCP tools), in order."""
    return [item for item in body.get("input") or [] if item.get("type") == "tool_search_output"]


def offered_namespaces(body: Json) -> set[str]:
    """The tool namespaces a request offers: in its tools, or found by an earlier tool_search."""
    tools = [*(body.get("tools") or [])]
    for found in tool_search_outputs(body):
        tools += found.get("tools") or []
    return {tool["name"] for tool in tools if tool.get("type") == "namespace"}


def function_call_outputs(body: Json) -> list[Json]:
    """The function_call_output and custom_tool_call_output items of a Responses-API request
    (Codex's tool results; the second kind answers a freeform tool such as apply_patch)."""
    kinds = ("function_call_output", "custom_tool_call_output")
    return [item for item in body.get("input") or [] if item.get("type") in kinds]


def function_responses(body: Json) -> list[Json]:
    """The functionResponse parts of a Gemini request (its tool results), in order."""
    return [
        part["functionResponse"]
        for content in body.get("contents") or []
        for part in content.get("parts") or []
        if "functionResponse" in part
    ]


@dataclass(frozen=True)
class Request:
    path: str
    body: Json
    answered_by: Turn | None  # None: not in the script, answered with a short text


# The short reply to every request the script does not cover (title generation, quota checks).
FALLBACK_TEXT = "ok"


class ScriptedModel:
    """A model server on 127.0.0.1 that answers from canned turns and records requests.

    Bounded: after `max_requests` requests or `time_limit` seconds it answers 529 (overloaded)
    to everything, and `close()` stops it. Use it as a context manager. Subclasses render a
    turn in their client's wire format.
    """

    def __init__(
        self, script: Sequence[Turn], *, max_requests: int = 40, time_limit: float = 60.0
    ) -> None:
        self._script = list(script)
        self._used = [False] * len(self._script)
        self._max_requests = max_requests
        self._deadline = time.monotonic() + time_limit
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.requests: list[Request] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    @property
    def unused_turns(self) -> list[Turn]:
        with self._lock:
            return [turn for turn, used in zip(self._script, self._used, strict=True) if not used]

    @property
    def main_requests(self) -> list[Json]:
        """Bodies of the requests that scripted turns answered, in order."""
        with self._lock:
            return [r.body for r in self.requests if r.answered_by is not None]

    def _answer(self, path: str, body: Json) -> tuple[int, Turn | None, int]:
        with self._lock:
            if len(self.requests) >= self._max_requests or time.monotonic() > self._deadline:
                self.requests.append(Request(path, body, None))
                return 529, None, 0
            turn = None
            for index, candidate in enumerate(self._script):
                if not self._used[index] and candidate.accepts(body):
                    self._used[index] = True
                    turn = candidate
                    break
            self.requests.append(Request(path, body, turn))
            return 200, turn, next(self._ids)

    def render(self, body: Json, turn: Turn | None, number: int) -> tuple[str, bytes]:
        """Content type and body answering `body` with `turn` (None: the fallback text)."""
        raise NotImplementedError

    def special(self, path: str) -> bytes | None:
        """A fixed JSON answer for a path outside the script, if the client needs one."""
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass  # the recorded requests say everything a test needs

            def _send(self, status: int, content_type: str, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = {"unparsed": raw.decode(errors="replace")}
                path = self.path.split("?", 1)[0]
                fixed = server.special(path)
                if fixed is not None:
                    self._send(200, "application/json", fixed)
                    return
                status, turn, number = server._answer(path, body)
                if status != 200:
                    error = {
                        "type": "error",
                        "error": {"type": "overloaded_error", "message": "script over"},
                    }
                    self._send(status, "application/json", json.dumps(error).encode())
                    return
                self._send(200, *server.render(body, turn, number))

            def do_GET(self) -> None:
                self._send(404, "application/json", b'{"type": "error"}')

            do_HEAD = do_GET

        return Handler


def _sse(events: list[Json]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


class ScriptedAnthropic(ScriptedModel):
    """The Messages API as Claude Code calls it: `ANTHROPIC_BASE_URL`, POST /v1/messages."""

    def special(self, path: str) -> bytes | None:
        return b'{"input_tokens": 10}' if path.endswith("/count_tokens") else None

    def render(self, body: Json, turn: Turn | None, number: int) -> tuple[str, bytes]:
        if turn is not None and turn.tool is not None:
            block: Json = {
                "type": "tool_use",
                "id": f"toolu_scripted{number:04d}",
                "name": turn.tool,
                "input": turn.input,
            }
            stop = "tool_use"
        else:
            value = turn.text if turn is not None and turn.text is not None else FALLBACK_TEXT
            block = {"type": "text", "text": value}
            stop = "end_turn"
        message = {
            "id": f"msg_scripted{number:04d}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "scripted"),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1},
        }
        if not body.get("stream"):
            whole = {**message, "content": [block], "stop_reason": stop}
            return "application/json", json.dumps(whole).encode()
        # The streaming events, in the order and shapes Claude Code parses.
        if block["type"] == "tool_use":
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        return "text/event-stream", _sse(
            [
                {"type": "message_start", "message": message},
                {"type": "content_block_start", "index": 0, "content_block": start},
                {"type": "content_block_delta", "index": 0, "delta": delta},
                {"type": "content_block_stop", "index": 0},
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": 5},
                },
                {"type": "message_stop"},
            ]
        )


class ScriptedOpenAI(ScriptedModel):
    """The Responses API as Codex calls it through a configured provider: POST /v1/responses.

    A `tool_use` turn naming `NS__tool` where NS is one of the namespaces the request offers
    (Codex puts each MCP server's tools in one, `mcp__<server>`), in its tools or in what an
    earlier tool_search found, calls `tool` in that namespace. A turn naming a freeform
    (`custom`) tool, apply_patch, passes its raw text as `{"input": text}`; one naming
    `tool_search` (offered with a model Codex has metadata for) asks Codex to search its
    deferred tools, MCP tools among them, with `{"query": ...}`.
    """

    def render(self, body: Json, turn: Turn | None, number: int) -> tuple[str, bytes]:
        kinds = {t.get("name") or t.get("type"): t.get("type") for t in body.get("tools") or []}
        if turn is not None and turn.tool is not None:
            call_id = f"call_scripted{number:04d}"
            if kinds.get(turn.tool) == "custom":  # freeform: the input is raw text
                item: Json = {
                    "type": "custom_tool_call",
                    "call_id": call_id,
                    "name": turn.tool,
                    "input": turn.input["input"],
                }
            elif kinds.get(turn.tool) == "tool_search":  # Codex itself runs the search
                item = {
                    "type": "tool_search_call",
                    "call_id": call_id,
                    "execution": "client",
                    "arguments": turn.input,
                    "status": "completed",
                }
            else:
                item = {
                    "type": "function_call",
                    "call_id": call_id,
                    "name": turn.tool,
                    "arguments": json.dumps(turn.input),
                }
                namespace, _, name = turn.tool.rpartition("__")
                if namespace in offered_namespaces(body):
                    item |= {"namespace": namespace, "name": name}
        else:
            value = turn.text if turn is not None and turn.text is not None else FALLBACK_TEXT
            item = {
                "type": "message",
                "role": "assistant",
                "id": f"msg_scripted{number:04d}",
                "content": [{"type": "output_text", "text": value}],
            }
        response = {"id": f"resp_scripted{number:04d}"}
        usage = {
            "input_tokens": 10,
            "input_tokens_details": None,
            "output_tokens": 5,
            "output_tokens_details": None,
            "total_tokens": 15,
        }
        return "text/event-stream", _sse(
            [
                {"type": "response.created", "response": response},
                {"type": "response.output_item.done", "item": item},
                {"type": "response.completed", "response": {**response, "usage": usage}},
            ]
        )


class ScriptedGemini(ScriptedModel):
    """The Gemini API as Gemini CLI calls it: `GOOGLE_GEMINI_BASE_URL`,
    POST /v1beta/models/<model>:streamGenerateContent?alt=sse."""

    def special(self, path: str) -> bytes | None:
        return b'{"totalTokens": 10}' if path.endswith(":countTokens") else None

    def render(self, body: Json, turn: Turn | None, number: int) -> tuple[str, bytes]:
        if turn is not None and turn.tool is not None:
            part: Json = {"functionCall": {"name": turn.tool, "args": turn.input}}
        else:
            part = {
                "text": turn.text if turn is not None and turn.text is not None else FALLBACK_TEXT
            }
        chunk = {
            "candidates": [
                {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
            ],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5,
                              "totalTokenCount": 15},
            "responseId": f"resp_scripted{number:04d}",
        }  # fmt: skip
        return "text/event-stream", f"data: {json.dumps(chunk)}\n\n".encode()


# --- Claude Code in an isolated home --------------------------------------------------------


@dataclass
class ClaudeRun:
    result: subprocess.CompletedProcess[str]
    transcripts: list[Path]  # the session files this run wrote or extended

    def output(self) -> Json:
        """The `--output-format json` result: session_id, result, is_error, num_turns..."""
        return json.loads(self.result.stdout)

    def records(self) -> list[Json]:
        """Every record of every transcript this run wrote, in file order."""
        return [
            json.loads(line)
            for path in self.transcripts
            for line in path.read_text().splitlines()
            if line.strip()
        ]


class _ClientHome:
    """A throwaway HOME for one real client: `run` its binary offline with the home's
    environment, and list the transcripts it wrote (files under `sessions` matching
    `pattern`, with their sizes). Each client's home says where those are."""

    binary: Path
    home: Path
    run_timeout = 30.0

    def env(self) -> dict[str, str]:
        raise NotImplementedError

    def _sessions(self) -> tuple[Path, str]:
        raise NotImplementedError

    def run(
        self, *args: str, cwd: Path | None = None, timeout: float | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`CLIENT ARGS` offline (mcp add/list and the like)."""
        return subprocess.run(
            [str(self.binary), *args],
            cwd=cwd or self.home,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout or self.run_timeout,
            stdin=subprocess.DEVNULL,
        )

    def transcripts(self) -> dict[Path, int]:
        root, pattern = self._sessions()
        return {path: path.stat().st_size for path in sorted(root.glob(pattern))}


class ClaudeHome(_ClientHome):
    """A throwaway HOME with its own CLAUDE_CONFIG_DIR, for running the real `claude`.

    Nothing the developer has configured (their ~/.claude, their API key) reaches it.
    """

    def __init__(self, clients: Clients, root: Path) -> None:
        self.claude = self.binary = clients.claude
        self.home = root / "home"
        self.config_dir = self.home / ".claude"
        self.config_dir.mkdir(parents=True, exist_ok=True)

    @property
    def settings_path(self) -> Path:
        return self.config_dir / "settings.json"

    @property
    def user_config_path(self) -> Path:
        """Where `claude mcp add --scope user` writes when CLAUDE_CONFIG_DIR is set."""
        return self.config_dir / ".claude.json"

    def write_settings(self, settings: Json) -> None:
        self.settings_path.write_text(json.dumps(settings, indent=2))

    def _sessions(self) -> tuple[Path, str]:
        return self.config_dir / "projects", "*/*.jsonl"

    def env(self, base_url: str | None = None, *, patient_mcp: bool = True) -> dict[str, str]:
        """The client's environment; `patient_mcp=False` leaves out what makes it wait longer
        for MCP servers than it does in a user's environment."""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "CLAUDE_CONFIG_DIR": str(self.config_dir),
            "LANG": "C.UTF-8",
            # Nothing outside the loopback server: no telemetry, updates or error reports.
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            # MCP tools are listed directly instead of behind the ToolSearch tool.
            "ENABLE_TOOL_SEARCH": "false",
        }
        if patient_mcp:
            env |= {
                # Connect MCP servers before the first request: by default `-p` waits at most
                # 5 s, and a server still starting is missing from that request's tools.
                "MCP_CONNECTION_NONBLOCKING": "0",
                # A loaded test machine can take longer to start an MCP server than Claude
                # Code's default connect timeout; then its tools are silently missing from the
                # request. memoryd's own server does not need it (tests/test_mcp_transport.py).
                "MCP_TIMEOUT": "60000",
            }
        if base_url is not None:
            env["ANTHROPIC_BASE_URL"] = base_url
            env["ANTHROPIC_API_KEY"] = "sk-ant-scripted-test-key"
        return env

    def prompt(
        self,
        prompt: str,
        server: ScriptedAnthropic,
        *,
        cwd: Path,
        allowed_tools: Sequence[str] = (),
        extra_args: Sequence[str] = (),
        timeout: float = 45.0,
        patient_mcp: bool = True,
    ) -> ClaudeRun:
        """`claude -p PROMPT` headless against the scripted server (`patient_mcp`: see env)."""
        before = self.transcripts()
        args = [str(self.claude), "-p", prompt, "--output-format", "json"]
        if allowed_tools:
            args += ["--allowedTools", ",".join(allowed_tools)]
        result = subprocess.run(
            [*args, *extra_args],
            cwd=cwd,
            env=self.env(server.base_url, patient_mcp=patient_mcp),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        after = self.transcripts()
        changed = [path for path, size in after.items() if before.get(path) != size]
        return ClaudeRun(result=result, transcripts=changed)


# --- Codex in an isolated home --------------------------------------------------------------

# The model Codex is told to use against the scripted server; it has no metadata for it and
# says so once ("Defaulting to fallback metadata"), which changes nothing the tests look at.
CODEX_MODEL = "gpt-5.1"
# A model Codex ships metadata for: it gets the apply_patch tool, and MCP tools behind a
# tool_search tool instead of in the request (docs/clients.md).
CODEX_CATALOG_MODEL = "gpt-5.5"


@dataclass
class CodexRun:
    result: subprocess.CompletedProcess[str]
    transcripts: list[Path]  # the rollout files this run wrote or extended

    def events(self) -> list[Json]:
        """The `codex exec --json` events: thread.started, item.completed, turn.completed..."""
        return [json.loads(line) for line in self.result.stdout.splitlines() if line.strip()]

    @property
    def thread_id(self) -> str:
        [started] = [e for e in self.events() if e["type"] == "thread.started"]
        return started["thread_id"]

    def records(self) -> list[Json]:
        return [
            json.loads(line)
            for path in self.transcripts
            for line in path.read_text().splitlines()
            if line.strip()
        ]


class CodexHome(_ClientHome):
    """A throwaway HOME with its own CODEX_HOME, for running the real `codex`.

    The scripted provider is passed with `-c` on each `exec`, so config.toml holds only what
    `codex mcp add` (or memoryd) wrote.
    """

    def __init__(self, clients: Clients, root: Path) -> None:
        self.codex = self.binary = clients.codex
        self.home = root / "home"
        self.codex_home = self.home / ".codex"
        self.codex_home.mkdir(parents=True, exist_ok=True)

    @property
    def config_path(self) -> Path:
        return self.codex_home / "config.toml"

    @property
    def hooks_path(self) -> Path:
        return self.codex_home / "hooks.json"

    def _sessions(self) -> tuple[Path, str]:
        return self.codex_home / "sessions", "*/*/*/rollout-*.jsonl"

    def env(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "CODEX_HOME": str(self.codex_home),
            "LANG": "C.UTF-8",
        }

    def exec(
        self,
        prompt: str,
        server: ScriptedOpenAI,
        *,
        cwd: Path,
        extra_args: Sequence[str] = (),
        resume: str | None = None,
        model: str = CODEX_MODEL,
        timeout: float = 45.0,
    ) -> CodexRun:
        """`codex exec --json PROMPT` headless against the scripted server; with `resume`, the
        session of that thread id goes on (`codex exec resume ID PROMPT`)."""
        provider = (
            f'{{name="scripted", base_url="{server.base_url}/v1", wire_api="responses", '
            "request_max_retries=0, stream_max_retries=0}"
        )
        before = self.transcripts()
        result = self.run(
            "exec", "--json", "--skip-git-repo-check", "--sandbox", "workspace-write",
            "-c", f'model="{model}"',
            "-c", 'model_provider="scripted"',
            "-c", f"model_providers.scripted={provider}",
            *extra_args, *(("resume", resume) if resume else ()), prompt,
            cwd=cwd,
            timeout=timeout,
        )  # fmt: skip
        after = self.transcripts()
        changed = [path for path, size in after.items() if before.get(path) != size]
        return CodexRun(result=result, transcripts=changed)

    def app_server(
        self,
        calls: Callable[[Callable[[str, Json], Json]], Any],
        *,
        cwd: Path,
        timeout: float = 30.0,
    ) -> Any:
        """Run `calls(call)` against `codex app-server` (JSON-RPC over stdio), initialised.

        `call(method, params)` returns the result. The same API Codex's own /hooks screen uses.
        """
        process = subprocess.Popen(
            [str(self.codex), "app-server"],
            cwd=cwd,
            env=self.env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        killer = threading.Timer(timeout, process.kill)  # a hung server cannot hang the test
        killer.start()
        ids = itertools.count(1)
        assert process.stdin is not None and process.stdout is not None
        stdin, stdout = process.stdin, process.stdout

        def send(message: Json) -> None:
            stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
            stdin.flush()

        def call(method: str, params: Json) -> Json:
            number = next(ids)
            send({"id": number, "method": method, "params": params})
            for line in stdout:
                message = json.loads(line)
                if message.get("id") == number:
                    if "error" in message:
                        raise RuntimeError(f"{method}: {message['error']}")
                    return message["result"]
            raise RuntimeError(f"codex app-server exited before answering {method}")

        try:
            call("initialize", {"clientInfo": {"name": "memoryd-tests", "version": "0"}})
            send({"method": "initialized"})
            return calls(call)
        finally:
            killer.cancel()
            stdin.close()
            process.kill()
            process.wait(timeout=10)

    def hooks(self, cwd: Path) -> list[Json]:
        """Codex's own view of the hooks for `cwd`: key, eventName, command, trustStatus..."""
        listed = self.app_server(lambda call: call("hooks/list", {"cwds": [str(cwd)]}), cwd=cwd)
        [entry] = listed["data"]
        return entry["hooks"]

    def trust_hooks(self, cwd: Path) -> list[str]:
        """Trust every hook Codex lists for `cwd`, as its /hooks screen does; returns the keys.

        Codex records trust in config.toml as `[hooks.state."<key>"] trusted_hash = <hash>`,
        the hash being the one `hooks/list` reports for the hook as it is now.
        """

        def trust(call: Callable[[str, Json], Json]) -> list[str]:
            [entry] = call("hooks/list", {"cwds": [str(cwd)]})["data"]
            state = {hook["key"]: {"trusted_hash": hook["currentHash"]} for hook in entry["hooks"]}
            edit = {"keyPath": "hooks.state", "value": state, "mergeStrategy": "upsert"}
            call(
                "config/batchWrite",
                {"edits": [edit], "filePath": None, "expectedVersion": None,
                 "reloadUserConfig": True},
            )  # fmt: skip
            return sorted(state)

        return self.app_server(trust, cwd=cwd)


# --- Gemini CLI in an isolated home ---------------------------------------------------------


# Gemini CLI routes each prompt through a classifier model first unless a model is named; the
# scripted server does not play that part.
GEMINI_MODEL = "gemini-2.5-flash"


@dataclass
class GeminiRun:
    result: subprocess.CompletedProcess[str]
    transcripts: list[Path]  # the chat files this run wrote or extended

    def output(self) -> Json:
        """The `-o json` result: session_id, response, stats."""
        return json.loads(self.result.stdout)


class GeminiHome(_ClientHome):
    """A throwaway HOME for running the real `gemini` (settings in ~/.gemini/)."""

    def __init__(self, clients: Clients, root: Path) -> None:
        self.gemini = self.binary = clients.gemini
        self.home = root / "home"
        self.gemini_dir = self.home / ".gemini"
        self.gemini_dir.mkdir(parents=True, exist_ok=True)

    @property
    def settings_path(self) -> Path:
        return self.gemini_dir / "settings.json"

    @property
    def trusted_folders_path(self) -> Path:
        return self.gemini_dir / "trustedFolders.json"

    run_timeout = 60.0  # `gemini` prints its `mcp` answers on stderr

    def _sessions(self) -> tuple[Path, str]:
        return self.gemini_dir / "tmp", "*/chats/session-*.json*"

    def trust_folder(self, folder: Path) -> None:
        """Trust `folder` as Gemini's own trust dialog does; untrusted, it loads no MCP server."""
        self.trusted_folders_path.write_text(json.dumps({str(folder): "TRUST_FOLDER"}))

    def env(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            # Gemini restarts itself under a second node to raise its heap limit: half of each
            # command's time, and no `mcp` command needs the bigger heap.
            "GEMINI_CLI_NO_RELAUNCH": "true",
        }

    def prompt(
        self,
        prompt: str,
        server: ScriptedGemini,
        *,
        cwd: Path,
        extra_args: Sequence[str] = (),
        timeout: float = 60.0,
    ) -> GeminiRun:
        """`gemini -p PROMPT` headless against the scripted server, every tool call approved.

        Selects the API-key login in the user settings first (`security.auth.selectedType`),
        keeping the rest: headless Gemini refuses to start without a selected login, and it
        ignores a system defaults file under a world-writable /tmp.
        """
        settings = json.loads(self.settings_path.read_text()) if self.settings_path.exists() else {}
        auth = settings.setdefault("security", {}).setdefault("auth", {})
        auth["selectedType"] = "gemini-api-key"
        self.settings_path.write_text(json.dumps(settings, indent=2))
        before = self.transcripts()
        result = subprocess.run(
            [str(self.gemini), "-m", GEMINI_MODEL, "-p", prompt, "-o", "json", "--yolo",
             *extra_args],
            cwd=cwd,
            env={**self.env(), "GOOGLE_GEMINI_BASE_URL": server.base_url,
                 "GEMINI_API_KEY": "scripted-test-key"},
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        after = self.transcripts()
        changed = [path for path, size in after.items() if before.get(path) != size]
        return GeminiRun(result=result, transcripts=changed)
