"""Issue 16, defects 1-7, each on small real-looking inputs written here.

1-4: what a shell command line reads, writes and names (workers.stages.entities.files_in_command and
the edges the parsers make of it); 5: error identity; 6: Codex outcomes; 7: Claude Code's
newest record types.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from workers.ingest import OWN_ANSWER, rows_for, without_own_answers
from workers.stages.entities import error_signature, files_in_command, guess_home
from workers.stages.transcripts import claude_code as cc
from workers.stages.transcripts import codex as cx
from workers.stages.transcripts.events import Action, Denied, Goal, Memory, Source, Triggered
from workers.stages.transcripts.lines import split_lines
from workers.stages.transcripts.state import ParseResult, ParserState

REPO = "/home/ann/repo"
PROJECTS = [("repo", REPO)]


def uses(command: str, cwd: str = REPO, home: str | None = "/home/ann") -> list[tuple[str, str]]:
    return [(u.access, u.entity.key) for u in files_in_command(command, cwd, PROJECTS, home)]


# --- 1. a path right after a flag ----------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("wc -l src/a.py", [("read", "repo:src/a.py")]),
        ("ls -la types/", [("read", "repo:types")]),
        ("rm -rf build/", [("write", "repo:build")]),
        ("head -20 src/a.py", [("read", "repo:src/a.py")]),
        ("head -n 20 src/a.py", [("read", "repo:src/a.py")]),  # -n takes the 20
        ("git add -A src/a.py", [("name", "repo:src/a.py")]),
        ("mkdir -p a/b c/d", [("write", "repo:a/b"), ("write", "repo:c/d")]),
        ("strings -n 8 bin/tool | rg -i compact", [("read", "repo:bin/tool")]),
    ],
)
def test_a_path_after_a_flag_is_kept(command: str, expected: list[tuple[str, str]]) -> None:
    assert uses(command) == expected


# --- 2. non-paths are not files ------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        # a sed script is the first operand; the file after it is read
        ("sed 's|types/||' list.txt", [("read", "repo:list.txt")]),
        ("sed -n '1,180p' src/config.ts", [("read", "repo:src/config.ts")]),
        ("git merge bob/x", []),
        ("git checkout feature/login && git push origin feature/login", []),
        ("git log origin/main..HEAD --oneline", []),
        ('git commit -m "Move the parser to src/parse.py and fix docs/"', []),
        ('gh pr create --title "Fix" --body "Touches src/a.py, see docs/x.md"', []),
        ('echo "done with src/a.py"', []),
        ("npm install @types/node lodash/fp", []),
        ("coderabbit-extract obra/coderabbit-review-helper/2 2>&1 | head -5", []),
        ("python -c \"import sys; open('x/y.txt')\"", []),
        ("python -m pkg.main", []),
        ("grep -rn 'src/old/' --include='*.py' .", [("read", "repo:.")]),
        ("find . -name '*.pyc' -delete 2>/dev/null", [("read", "repo:.")]),
        (
            "pytest tests/test_x.py::TestA::test_b -v",
            [("name", "repo:tests/test_x.py")],  # the node id names its file
        ),
        ("ls ~/.claude/commands", [("read", "/home/ann/.claude/commands")]),
        ("cat ~bob/notes.txt", []),  # another user's home: not known
        ("echo x > /dev/null 2>&1 < /dev/stdin", []),
    ],
)
def test_non_paths_are_not_files(command: str, expected: list[tuple[str, str]]) -> None:
    assert uses(command) == expected


def test_a_tilde_without_a_known_home_is_dropped() -> None:
    assert uses("ls ~/.claude/commands && cat ./a.txt", home=None) == [("read", "repo:a.txt")]


def test_the_home_comes_from_the_transcript_path_or_a_home_like_cwd() -> None:
    assert guess_home("/Users/ann/.claude/projects/-x/s.jsonl") == "/Users/ann"
    assert guess_home("/data/u1/.codex/sessions/2026/01/01/rollout-x.jsonl") == "/data/u1"
    assert guess_home("/srv/t/s.jsonl", "/home/bob/src/app") == "/home/bob"
    assert guess_home("/srv/t/s.jsonl", "/srv/app") is None


# --- 3. where a command runs ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("git -C sub add f.py", [("name", "repo:sub/f.py")]),
        ("git -C /tmp/other diff -- a.py", [("name", "/tmp/other/a.py")]),
        ("git -C ~/notes add todo.md", [("name", "/home/ann/notes/todo.md")]),
        ("cd sub && mkdir -p src/x", [("write", "repo:sub/src/x")]),
        (
            "cd sub; touch a.txt; cd ..; touch b.txt",
            [("write", "repo:sub/a.txt"), ("write", "repo:b.txt")],
        ),
        (
            "(cd sub && touch x.txt) && touch y.txt",
            [("write", "repo:sub/x.txt"), ("write", "repo:y.txt")],
        ),
        ("bash -lc 'cd /tmp && cat a.txt'", [("read", "/tmp/a.txt")]),
        ("cd ~/notes && cat todo.md", [("read", "/home/ann/notes/todo.md")]),
        # a directory nobody can know: the relative paths after it are dropped, not guessed
        ('cd "$DIR" && rm -rf build', []),
    ],
)
def test_paths_resolve_where_the_command_ran(command: str, expected: list[tuple[str, str]]) -> None:
    assert uses(command) == expected


# --- 4. shell writes and reads -------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("echo x > f.txt", [("write", "repo:f.txt")]),
        ("echo x >> log/run.log", [("write", "repo:log/run.log")]),
        ("make 2>&1 | tee build.log", [("write", "repo:build.log")]),
        ("sed -i 's/a/b/' conf.ini", [("write", "repo:conf.ini")]),
        ("sed -i '' 's/a/b/' conf.ini", [("write", "repo:conf.ini")]),  # BSD sed
        ("cp a.txt b.txt", [("read", "repo:a.txt"), ("write", "repo:b.txt")]),
        ("mv a.txt b.txt", [("write", "repo:a.txt"), ("write", "repo:b.txt")]),
        ("rm f.txt", [("write", "repo:f.txt")]),
        ("touch f.txt", [("write", "repo:f.txt")]),
        ("mkdir d", [("write", "repo:d")]),
        ("cat f.txt", [("read", "repo:f.txt")]),
        ("head f.txt", [("read", "repo:f.txt")]),
        ("grep -n PATTERN f.txt", [("read", "repo:f.txt")]),
        ("wc f.txt", [("read", "repo:f.txt")]),
        ("sort -o out.txt in.txt", [("write", "repo:out.txt"), ("read", "repo:in.txt")]),
        (
            "python gen.py < in.json > out.json",
            [("read", "repo:in.json"), ("write", "repo:out.json"), ("name", "repo:gen.py")],
        ),
        # reading then writing one file in one command: writing wins
        ("cat f.txt | sort > f.txt", [("write", "repo:f.txt")]),
        (
            "git checkout -- a.py && git rm old.py",
            [("write", "repo:a.py"), ("write", "repo:old.py")],
        ),
        (
            "cat > gen/out.py <<'EOF'\nprint('src/not_a_file.py')\nEOF",
            [("write", "repo:gen/out.py")],
        ),
        ("ruff check src/a.py", [("name", "repo:src/a.py")]),
    ],
)
def test_shell_writes_and_reads(command: str, expected: list[tuple[str, str]]) -> None:
    assert sorted(uses(command)) == sorted(expected)


def _claude(rtype: str, uuid: str, content: Any, **extra: Any) -> dict[str, Any]:
    return {
        "type": rtype,
        "sessionId": "5e55a0d1-0000-4000-8000-000000000001",
        "uuid": uuid,
        "parentUuid": None,
        "cwd": REPO,
        "version": "2.1.301",
        "timestamp": "2026-11-20T10:00:00.000Z",
        "message": {"role": rtype, "content": content},
        **extra,
    }


def _jsonl(*records: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def _parse_claude(data: bytes, path: str = "/t/5e55a0d1.jsonl") -> ParseResult:
    lines, _ = split_lines(data, 0)
    return cc.parse(lines, None, Source.of(path, PROJECTS))


def _bash(uuid: str, call_id: str, command: str) -> dict[str, Any]:
    block = {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": command}}
    return _claude("assistant", uuid, [block])


def _result(uuid: str, call_id: str, text: str, is_error: bool = False) -> dict[str, Any]:
    block = {"type": "tool_result", "tool_use_id": call_id, "content": text}
    return _claude("user", uuid, [block | {"is_error": is_error}])


def test_a_bash_call_reads_modifies_and_mentions_via_shell() -> None:
    r = _parse_claude(
        _jsonl(
            _claude("user", "u1", "tidy up the build"),
            _bash("a1", "toolu_1", "cat setup.cfg && rm -rf build/ && pytest tests/ -q"),
            _result("u2", "toolu_1", "3 passed"),
        )
    )
    edges = sorted(
        (a.verb, a.entity.key, a.via, a.outcome) for a in r.events if isinstance(a, Action)
    )
    assert edges == [
        ("EXECUTES", "cat", "tool", "ok"),
        ("EXECUTES", "pytest", "tool", "ok"),
        ("EXECUTES", "rm", "tool", "ok"),
        ("MENTIONS", "repo:tests", "shell", "ok"),
        ("MODIFIES", "repo:build", "shell", "ok"),
        ("READS", "repo:setup.cfg", "shell", "ok"),
    ]
    # the row shaping keeps the marker and puts each verb in its table
    tables = rows_for(r, "/t/5e55a0d1.jsonl").tables
    assert [(e["out"].key, e["via"]) for e in tables["edge_modifies"]] == [
        (_entity_key("file", "repo:build"), "shell")
    ]
    assert len(tables["edge_reads"]) == 1 and len(tables["edge_mentions"]) == 1
    assert {e["via"] for e in tables["edge_executes"]} == {"tool"}


def _entity_key(kind: str, key: str) -> str:
    from memoryd.ids import entity_id

    return entity_id(kind, key)


def test_a_denied_shell_call_is_denied_on_its_files_too() -> None:
    r = _parse_claude(
        _jsonl(
            _bash("a1", "toolu_1", "rm -rf dist"),
            _result("u2", "toolu_1", "The user doesn't want to proceed with this tool use.", True),
        )
    )
    assert [a for a in r.events if isinstance(a, Action)] == []
    assert sorted(d.entity.key for d in r.events if isinstance(d, Denied)) == ["repo:dist", "rm"]


# --- 5. error identity ---------------------------------------------------------------------

NPM_WARN = 'npm warn Unknown env config "devdir". This will stop working in the next major.\n'


def test_a_warning_line_never_names_the_failure() -> None:
    ts = error_signature(
        NPM_WARN + "src/app.ts(3,21): error TS2307: Cannot find module './gen' or its "
        "corresponding type declarations.",
        2,
    )
    node = error_signature(
        NPM_WARN + "TypeError: generate is not a function\n    at main (/w/app/cli.js:12:5)", 1
    )
    assert (ts.type, ts.message) == (
        "TS2307",
        "Cannot find module '<path>' or its corresponding type declarations.",
    )
    assert (node.type, node.message) == ("TypeError", "generate is not a function")
    assert ts.key != node.key


def test_http_statuses_are_kept_and_urls_masked() -> None:
    sigs = [
        error_signature(f"Request failed with status code {code} for https://api.x.dev/v1/{n}")
        for code, n in ((403, "a"), (404, "b"), (504, "c"), (404, "d"))
    ]
    assert [s.message for s in sigs] == [
        "Request failed with status code 403 for <url>",
        "Request failed with status code 404 for <url>",
        "Request failed with status code 504 for <url>",
        "Request failed with status code 404 for <url>",
    ]
    assert len({s.key for s in sigs}) == 3  # two 404s on different URLs are one failure
    curl = error_signature("curl: (22) The requested URL returned error: 503", 22)
    assert (curl.type, curl.message) == (
        "http",
        "curl: (<n>) The requested URL returned error: 503",
    )


def test_a_lone_slash_is_not_a_path_and_codes_keep_their_digits() -> None:
    sig = error_signature(
        'Traceback (most recent call last):\n  File "/w/a.py", line 3, in <module>\n'
        "TypeError: unsupported operand type(s) for /: 'str' and 'int'"
    )
    assert sig.message == "unsupported operand type(s) for /: 'str' and 'int'"
    ruff = error_signature("src/a.py:1:1: E902 No such file or directory (os error 2)", 1)
    assert ruff.message == "<path>:<n>:<n>: E902 No such file or directory (os error <n>)"
    rust = error_signature(
        "error[E0425]: cannot find value `x` in this scope\n --> src/main.rs:4:5"
    )
    assert (rust.type, rust.message) == ("E0425", "cannot find value `x` in this scope")


def test_volatile_parts_are_masked_so_repeats_share_a_key() -> None:
    a = error_signature("ValueError: bad row 17 in /tmp/tmpa81xk2/data.csv after 0.52s")
    b = error_signature("ValueError: bad row 4 in /tmp/tmpq0z9/data.csv after 1.9s")
    assert a.key == b.key and a.message == "bad row <n> in <path> after <n>s"


def test_a_pytest_node_id_keeps_its_file_name_not_its_directory() -> None:
    # The same test failing, shown from the repo root and from test/ (fixture 37f83ec9).
    node = "test_combined_transcript_link.py::TestCombinedTranscriptLink::test_valid_cache"
    root = error_signature(f"FAILED test/{node}\n=== 3 failed, 3 passed in 0.41s ===")
    inner = error_signature(f"FAILED {node}\n=== 1 failed, 5 passed in 0.35s ===")
    assert (root.type, root.message) == (inner.type, inner.message) == ("failed", node)
    assert root.key == inner.key
    # One test name in two files: two failures.
    a = error_signature("FAILED tests/test_a.py::test_basic - assert 1 == 2")
    b = error_signature("FAILED tests/test_b.py::test_basic - assert 1 == 2")
    assert a.message == "test_a.py::test_basic - assert <n> == <n>"
    assert a.key != b.key


def test_pytest_running_no_test_is_one_failure_however_worded() -> None:
    bar = "=" * 20
    sigs = [
        error_signature(f"collected 205 items / 205 deselected / 0 selected\n{bar} {s} {bar}", 5)
        for s in (
            "205 deselected in 0.58s",
            "no tests collected (205 deselected) in 0.39s",
            "no tests ran in 0.01s",
            "3 deselected, 1 warning in 0.20s",
        )
    ]
    assert {(s.type, s.message) for s in sigs} == {("pytest", "no tests ran")}
    assert len({s.key for s in sigs}) == 1
    assert sigs[0].line == f"{bar} 205 deselected in 0.58s {bar}"  # shown as it appeared
    failed = error_signature(f"{bar} 2 failed, 205 deselected in 0.58s {bar}", 1)
    assert (failed.type, failed.message) == ("pytest", "<n> failed, <n> deselected in <n>s")


# --- 6. Codex outcomes ---------------------------------------------------------------------


def _env(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"timestamp": "2026-11-20T10:00:00.000Z", "type": kind, "payload": payload}


CODEX_META = _env(
    "session_meta",
    {"id": "019e0000-0000-7000-8000-000000000001", "cwd": REPO, "cli_version": "0.125.0"},
)


def _exec(call_id: str, cmd: str) -> dict[str, Any]:
    args = json.dumps({"cmd": cmd, "workdir": REPO})
    payload = {"type": "function_call", "name": "exec_command", "arguments": args}
    return _env("response_item", payload | {"call_id": call_id})


def _out(call_id: str, text: str, name: str = "function_call_output") -> dict[str, Any]:
    return _env("response_item", {"type": name, "call_id": call_id, "output": text})


def _exited(code: int, body: str) -> str:
    return (
        f"Chunk ID: 4f1a\nWall time: 0.0512 seconds\nProcess exited with code {code}\n"
        f"Original token count: 12\nOutput:\n{body}"
    )


def _parse_codex(*records: dict[str, Any]) -> ParseResult:
    lines, _ = split_lines(_jsonl(CODEX_META, *records), 0)
    return cx.parse(lines, None, Source.of("/t/rollout-x.jsonl", PROJECTS))


def test_a_sandbox_block_is_an_error_even_when_rg_ends_the_pipeline() -> None:
    r = _parse_codex(
        _exec("c1", "ps aux | rg memoryd"),
        _out("c1", _exited(1, "zsh:1: operation not permitted: ps\n")),
        _exec("c2", "rg -n TODO src"),
        _out("c2", _exited(1, "")),  # no match: fine
    )
    actions = sorted((a.entity.key, a.outcome) for a in r.events if isinstance(a, Action))
    assert actions == [("ps", "error"), ("repo:src", "ok"), ("rg", "error"), ("rg", "ok")]
    (t,) = [e for e in r.events if isinstance(e, Triggered)]
    assert (t.exit_code, t.error.name) == (1, "exit: zsh:<n>: operation not permitted: ps")


def test_a_browser_policy_rejection_is_denied() -> None:
    payload = {"type": "function_call", "name": "js", "arguments": '{"code": "location.href"}'}
    r = _parse_codex(
        _env("response_item", payload | {"call_id": "c1"}),
        _out("c1", "Codex rejected this action due to browser security policy."),
    )
    (d,) = [e for e in r.events if isinstance(e, Denied)]
    assert (d.reason, d.entity.key) == ("permission_denied", "js")
    assert [e for e in r.events if isinstance(e, Action | Triggered)] == []


# --- 7. Claude Code's newest record types --------------------------------------------------

NEW_TYPES = [
    "api-request",
    "api-request-blob",
    "api-request-shape",
    "atis-latch",
    "cost-state",
    "tools-used",
    "queue-operation",
    "last-prompt",
    "attachment",
]


def _bookkeeping(rtype: str, n: int) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "type": rtype,
        "sessionId": "5e55a0d1-0000-4000-8000-000000000001",
        "timestamp": "2026-11-20T10:00:00.000Z",
        "uuid": f"{rtype}-{n}",
    }
    if rtype == "api-request-blob":  # what was sent to the model: never a prompt
        rec["messages"] = [
            {"role": "system", "content": "You are Claude Code, Anthropic's official CLI."},
            {"role": "user", "content": "<system-reminder>todo list empty</system-reminder>hi"},
        ]
        rec["message"] = {"role": "user", "content": "please delete everything"}
    return rec


def test_newest_record_types_are_skipped_quietly() -> None:
    r = _parse_claude(
        _jsonl(*(_bookkeeping(t, n) for n in range(3) for t in NEW_TYPES))
        + _jsonl(_claude("user", "u1", "add a --json flag"))
    )
    assert r.skipped == ()
    assert [(m.kind, m.content) for m in r.events if isinstance(m, Memory)] == [
        ("user_prompt", "add a --json flag")
    ]
    assert [g.intent for g in r.events if isinstance(g, Goal)] == ["add a --json flag"]


def test_an_unknown_type_is_reported_once_per_file_with_a_count() -> None:
    first = _jsonl(*(_bookkeeping("brand-new", n) for n in range(4)))
    second = _jsonl(*(_bookkeeping("brand-new", n) for n in range(4, 6)))
    lines, _ = split_lines(first, 0)
    r1 = cc.parse(lines, None, Source("/t/x.jsonl"))
    lines, _ = split_lines(second, len(first))
    state = ParserState.from_json(json.loads(json.dumps(r1.state.to_json())))
    r2 = cc.parse(lines, state, Source("/t/x.jsonl"))
    assert [(s.offset, s.reason) for s in r1.skipped] == [
        (0, "unknown record type 'brand-new': 4 lines in this batch, skipped")
    ]
    assert r2.skipped == ()
    assert r2.state.context["unknown_types"] == {"brand-new": 6}


def test_memoryds_own_answers_keep_their_call_not_their_text() -> None:
    """An agent's call of memoryd's MCP search is remembered, its answer (memories stored
    already) is not stored again; another server's answer is."""
    found = "memory:abc  session 5e55 #3  the retry loop in worker.py"
    r = without_own_answers(
        _parse_claude(
            _jsonl(
                _claude("user", "u1", "why does the worker retry?"),
                _claude(
                    "assistant",
                    "a1",
                    [
                        {
                            "type": "tool_use",
                            "id": "toolu_1",
                            "name": "mcp__memoryd__search",
                            "input": {"query": "worker retry"},
                        },
                        {
                            "type": "tool_use",
                            "id": "toolu_2",
                            "name": "mcp__github__get_issue",
                            "input": {"number": 7},
                        },
                    ],
                ),
                _result("r1", "toolu_1", found),
                _result("r2", "toolu_2", "issue 7: retries never stop"),
            )
        )
    )
    answers = [m for m in r.events if isinstance(m, Memory) and m.kind == "tool_result"]
    assert [(m.tool, m.content) for m in answers] == [
        ("mcp:memoryd:search", OWN_ANSWER),
        ("mcp:github:get_issue", "issue 7: retries never stop"),
    ]
    calls = [m for m in r.events if isinstance(m, Memory) and m.kind == "tool_call"]
    assert [m.tool for m in calls] == ["mcp:memoryd:search", "mcp:github:get_issue"]
    assert "worker retry" in calls[0].content
