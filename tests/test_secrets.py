"""Planted secrets through the real pipeline: a watched repository indexed and a Claude Code
transcript ingested (in two steps, as a growing file is tailed) by the private Redis, the
embedded database and the real model; then no planted value may be anywhere in the data dir
(every file, read as bytes) or in the logs, and none in any row of any table."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import random
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from memoryd import projects, queue
from memoryd.daemon.runtime import Runtime
from tests.conftest import git_init, index_tree, settings_for

_RNG = random.Random(20261123)


def _random_text(alphabet: str, n: int) -> str:
    return "".join(_RNG.choice(alphabet) for _ in range(n))


_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
AWS_KEY_ID = "AKIA" + _random_text("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
AWS_SECRET = "OLTmUuRNp/I3DZ4mDicTZVCko6bQf1wMMy+LEj/S"
GITHUB_PAT = "ghp_" + _random_text(_ALNUM, 36)
ENV_PASSWORD = "Vx7-pQ2mZ9rL4wK!"
SLACK_TOKEN = "xoxb-2718281828-3141592653589-" + _random_text(_ALNUM, 24)
JWT_PAYLOAD = base64.urlsafe_b64encode(b'{"sub":"user-42","role":"admin"}').decode().rstrip("=")
JWT_SIGNATURE = _random_text(_ALNUM + "-_", 43)
JWT = f"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.{JWT_PAYLOAD}.{JWT_SIGNATURE}"
OPENAI_KEY = "sk-proj-" + _random_text(_ALNUM + "-_", 48)
ANTHROPIC_KEY = "sk-ant-api03-" + _random_text(_ALNUM, 40) + "-" + _random_text(_ALNUM, 8)
DB_PASSWORD = "Hq4Zr8Lm2Wx6Pn"
DB_URL = f"postgres://app:{DB_PASSWORD}@db.internal:5432/app"
# A PKCS#8 RSA private key: its real DER header, then 1,191 random key bytes.
_DER = bytes.fromhex("308204bd020100300d06092a864886f70d0101010500048204a7")
_PEM_BODY = base64.b64encode(_DER + _RNG.randbytes(1191)).decode()
PEM_LINES = [_PEM_BODY[i : i + 64] for i in range(0, len(_PEM_BODY), 64)]
PEM = "-----BEGIN PRIVATE KEY-----\n" + "\n".join(PEM_LINES) + "\n-----END PRIVATE KEY-----\n"

# Every value that must not be stored; the PEM line by line (each would betray the key).
PLANTED = {
    "aws key id": AWS_KEY_ID,
    "aws secret": AWS_SECRET,
    "github pat": GITHUB_PAT,
    ".env password": ENV_PASSWORD,
    "slack token": SLACK_TOKEN,
    "jwt payload": JWT_PAYLOAD,
    "jwt signature": JWT_SIGNATURE,
    "openai key": OPENAI_KEY,
    "anthropic key": ANTHROPIC_KEY,
    "db url password": DB_PASSWORD,
    **{f"pem line {i}": line for i, line in enumerate(PEM_LINES) if len(line) >= 16},
}
# Text stored as it is: the scan of the data dir must find these, or it could not see a leak.
CODE_CANARY = "canary_lighthouse_keeper_7Q"
TRANSCRIPT_CANARY = "canary-albatross-harbour-3Z"

CONFIG_PY = f'''"""Service configuration."""

AWS_ACCESS_KEY_ID = "{AWS_KEY_ID}"
AWS_SECRET_ACCESS_KEY = "{AWS_SECRET}"
GITHUB_TOKEN = "{GITHUB_PAT}"
SLACK_BOT_TOKEN = "{SLACK_TOKEN}"
OPENAI_API_KEY = "{OPENAI_KEY}"
ANTHROPIC_API_KEY = "{ANTHROPIC_KEY}"
DATABASE_URL = "{DB_URL}"
SESSION_JWT = "{JWT}"
SIGNING_KEY = """{PEM}"""
# the same pair again, with no labels at all
FALLBACK = ("{AWS_KEY_ID}", "{AWS_SECRET}")


def connect_database(url: str = DATABASE_URL) -> str:
    """Open the {CODE_CANARY} connection."""
    return url.split("@")[-1]
'''
ENV_FILE = f"""DB_PASSWORD={ENV_PASSWORD}
AWS_ACCESS_KEY_ID={AWS_KEY_ID}
AWS_SECRET_ACCESS_KEY={AWS_SECRET}
GITHUB_TOKEN={GITHUB_PAT}
DATABASE_URL={DB_URL}
"""


class _Transcript:
    """A Claude Code 2.x session file, written record by record as the agent would."""

    def __init__(self, path: Path, cwd: Path) -> None:
        self.path, self.cwd = path, str(cwd)
        self.session = str(uuid.UUID(int=_RNG.getrandbits(128)))
        self.parent: str | None = None
        self.second = 0

    def _record(self, kind: str, message: dict[str, Any], **extra: Any) -> None:
        record_id = str(uuid.UUID(int=_RNG.getrandbits(128)))
        self.second += 1
        record = {
            "parentUuid": self.parent,
            "isSidechain": False,
            "userType": "external",
            "cwd": self.cwd,
            "sessionId": self.session,
            "version": "2.1.17",
            "gitBranch": "main",
            "type": kind,
            "message": message,
            "uuid": record_id,
            "timestamp": f"2026-11-23T10:00:{self.second:02d}.000Z",
            **extra,
        }
        self.parent = record_id
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")

    def prompt(self, text: str) -> None:
        self._record("user", {"role": "user", "content": text})

    def say(self, text: str) -> None:
        content = [{"type": "text", "text": text}]
        self._record("assistant", {"role": "assistant", "type": "message", "content": content})

    def bash(self, command: str, output: str, is_error: bool = False) -> None:
        call_id = "toolu_" + _random_text(_ALNUM, 24)
        use = {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": command}}
        self._record("assistant", {"role": "assistant", "type": "message", "content": [use]})
        result = {
            "tool_use_id": call_id,
            "type": "tool_result",
            "content": output,
            "is_error": is_error,
        }
        self._record(
            "user",
            {"role": "user", "content": [result]},
            toolUseResult={"stdout": output, "stderr": "", "interrupted": False},
        )


def _leaks(blob: bytes) -> list[str]:
    return sorted(name for name, value in PLANTED.items() if value.encode() in blob)


async def _ingest(rt: Runtime, path: Path) -> dict[str, Any]:
    assert rt.redis is not None
    [job] = await queue.enqueue_ingest(rt.redis, [str(path)])
    return await queue.wait_for(job, timeout=300)


async def test_planted_secrets_reach_neither_disk_nor_logs(
    data_dir: Path, tmp_path: Path, stack: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    assert len({v for v in PLANTED.values()}) == len(PLANTED) >= 9

    repo = tmp_path / "service"
    (repo / "deploy").mkdir(parents=True)
    (repo / "config.py").write_text(CONFIG_PY)
    (repo / ".env").write_text(ENV_FILE)
    (repo / "deploy" / "server.pem").write_text(PEM)
    git_init(repo)
    totals = await index_tree(stack, repo)
    assert (totals["files"], totals["indexed"], totals["skipped"]) == (3, 1, 2)

    transcript = _Transcript(tmp_path / "session.jsonl", repo)
    # The key pair with no label, in the prompt the session's goal is made from.
    transcript.prompt(f"Use {AWS_KEY_ID} {AWS_SECRET} for the S3 client, {TRANSCRIPT_CANARY}")
    transcript.say("I'll look at the environment file first.")
    transcript.bash("cat .env", ENV_FILE)
    transcript.bash("cat deploy/server.pem", PEM)
    transcript.say(f"The key id {AWS_KEY_ID} goes with {AWS_SECRET}; the PEM is loaded.")
    report = await _ingest(stack, transcript.path)
    assert report["memories"] == 7

    # Appended later and read in a second job: the values alone, known only from before.
    transcript.prompt(f"Is the db password still {ENV_PASSWORD} ?")
    transcript.prompt(f"This line of the key looks odd:\n{PEM_LINES[7]}")
    transcript.say(f"Yes: {ENV_PASSWORD} is current, and {AWS_SECRET} too.")
    transcript.bash(
        f"curl -H 'Authorization: Bearer {JWT}' https://api.internal/v1 && "
        f"SLACK_TOKEN={SLACK_TOKEN} OPENAI_API_KEY={OPENAI_KEY} ./notify && "
        f"psql {DB_URL} -c 'select 1'",
        f"posted; {GITHUB_PAT} rotated; used {ANTHROPIC_KEY}",
    )
    report = await _ingest(stack, transcript.path)
    assert report["memories"] == 5

    store = stack.store
    assert store is not None
    dump = await store.dump()
    rows = json.dumps(dump, default=str).encode()
    assert _leaks(rows) == []
    assert CODE_CANARY.encode() in rows and TRANSCRIPT_CANARY.encode() in rows

    # What was stored instead: the same text, each secret replaced in place.
    states = {row["path"]: (row["status"], row.get("reason")) for row in dump["file_state"]}
    assert states == {
        "config.py": ("indexed", None),
        ".env": ("skipped", "a secret file (secret_files: .env)"),
        "deploy/server.pem": ("skipped", "a secret file (secret_files: *.pem)"),
    }
    [chunk] = dump["code_chunk"]
    assert chunk["path"] == "config.py"
    config_text = chunk["content"]
    assert 'AWS_SECRET_ACCESS_KEY = "[REDACTED:aws-secret-key]"' in config_text
    assert 'FALLBACK = ("[REDACTED:aws-access-key]", "[REDACTED:aws-secret-key]")' in config_text
    # Line numbers are the file's own: the redacted PEM kept its line count, so `def` is where
    # it is in the file (the whole file is one chunk once its secrets are out).
    file_lines = CONFIG_PY.splitlines()
    chunk_lines = chunk["content"].splitlines()
    assert (chunk["start_line"], chunk["end_line"]) == (1, len(file_lines))
    assert len(chunk_lines) == len(file_lines)
    define = "def connect_database(url: str = DATABASE_URL) -> str:"
    assert chunk_lines.index(define) == file_lines.index(define) == 43

    prompts = sorted((m["seq"], m["content"]) for m in dump["memory"] if m["kind"] == "user_prompt")
    assert [text for _, text in prompts] == [
        "Use [REDACTED:aws-access-key] [REDACTED:aws-secret-key] for the S3 client, "
        + TRANSCRIPT_CANARY,
        "Is the db password still [REDACTED:env-secret] ?",
        "This line of the key looks odd:\n[REDACTED:private-key]",
    ]
    [goal] = dump["goal"]
    assert goal["intent"] == prompts[0][1]
    [cursor] = dump["transcript_cursor"]
    remembered = cursor["state"]["parser"]["secrets"]
    assert len(remembered) >= 9 and set(remembered.values()) >= {"env-secret", "private-key"}

    # Every file memoryd wrote: the database's files, the Redis append-only file, the rest.
    await stack.close()
    files = [p for p in data_dir.rglob("*") if p.is_file()]
    assert any(p.name.endswith(".aof") or "appendonly" in p.name for p in files), files
    on_disk = b"".join(p.read_bytes() for p in files)
    assert CODE_CANARY.encode() in on_disk and TRANSCRIPT_CANARY.encode() in on_disk
    assert {str(p.relative_to(data_dir)): _leaks(p.read_bytes()) for p in files} == {
        str(p.relative_to(data_dir)): [] for p in files
    }

    logged = "\n".join([caplog.text, *(repr(r.args) for r in caplog.records)]).encode()
    assert "index_files" in caplog.text and "skip .env" in caplog.text
    assert _leaks(logged) == []


@contextlib.asynccontextmanager
async def _running(data_dir: Path, **settings: Any) -> AsyncIterator[Runtime]:
    rt = Runtime(settings_for(data_dir, **settings))
    try:
        await rt.start_queue(exclusive=True)
        await rt.serve()
        yield rt
    finally:
        await rt.close()


async def _env_file_state(rt: Runtime, root: Path) -> tuple[dict[str, Any], list[str]]:
    """The index of a repo after a sync: .env's state and the paths holding valid chunks."""
    await index_tree(rt, root)
    assert rt.store is not None
    project_id = projects.resolve(root).id
    [state] = (await rt.store.code_file_states(project_id, [".env"])).values()
    return state, sorted(await rt.store.code_index(project_id))


async def test_secret_files_is_a_setting_that_applies_to_files_indexed_before(
    data_dir: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "app"
    repo.mkdir()
    (repo / ".env").write_text(ENV_FILE)
    (repo / "app.py").write_text("def main() -> int:\n    return 0\n")
    git_init(repo)
    async with _running(data_dir) as rt:
        state, indexed = await _env_file_state(rt, repo)
        assert (state["status"], state["reason"]) == (
            "skipped",
            "a secret file (secret_files: .env)",
        )
        assert indexed == ["app.py"]
    # The user narrows the list: the unchanged .env is read now, its secrets redacted.
    async with _running(data_dir, secret_files=["*.pem"]) as rt:
        state, indexed = await _env_file_state(rt, repo)
        assert state["status"] == "indexed" and indexed == [".env", "app.py"]
        assert rt.store is not None
        dump = await rt.store.dump()
        [chunk] = [c for c in dump["code_chunk"] if c["path"] == ".env"]
        assert chunk["content"].splitlines()[0] == "DB_PASSWORD=[REDACTED:env-secret]"
        assert _leaks(json.dumps(dump, default=str).encode()) == []
    # And back: the file indexed before is skipped again and its chunks retired.
    async with _running(data_dir) as rt:
        state, indexed = await _env_file_state(rt, repo)
        assert state["status"] == "skipped" and indexed == ["app.py"]
