"""Canonical entities: files, commands, tools, URLs, error signatures."""

from __future__ import annotations

import pytest

from workers.stages.entities import (
    Project,
    as_projects,
    canonical_commands,
    canonical_error,
    canonical_file,
    canonical_tool,
    canonical_url,
    command_programs,
    error_signature,
    normalize_path,
)

PROJECTS = [("app", "/home/u/app"), ("lib", "/home/u/app/vendor/lib")]

# --- files -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "cwd", "key"),
    [
        ("src/a.py", "/home/u/app", "app:src/a.py"),
        ("./src/./a.py", "/home/u/app", "app:src/a.py"),
        ("../src/../src/a.py", "/home/u/app/docs", "app:src/a.py"),
        ("/home/u/app/src/a.py", "/elsewhere", "app:src/a.py"),
        ("/home/u/app//src/a.py", None, "app:src/a.py"),
        ("/home/u/app", None, "app:."),
        ("/home/u/app/vendor/lib/x.py", None, "lib:x.py"),  # the nested project wins
        ("/home/u/application/x.py", None, "/home/u/application/x.py"),  # prefix ≠ inside
        ("/tmp/x.py", "/home/u/app", "/tmp/x.py"),
        ("notes.md", None, "notes.md"),
    ],
)
def test_file_keys(path: str, cwd: str | None, key: str) -> None:
    entity = canonical_file(path, cwd, PROJECTS)
    assert entity is not None
    assert entity.key == key and entity.raw == path and entity.kind == "file"


def test_a_tilde_is_expanded_with_the_home_or_kept_when_no_home_is_known() -> None:
    e = canonical_file("~/.claude/CLAUDE.md", "/home/u/app", PROJECTS, home="/home/u")
    assert e is not None and (e.key, e.raw) == ("/home/u/.claude/CLAUDE.md", "~/.claude/CLAUDE.md")
    # Whose home is unknown, but the file is named: it still gets its edge (issue 33).
    e = canonical_file("~/.claude/../.claude/CLAUDE.md", "/home/u/app", PROJECTS)
    assert e is not None and e.key == "~/.claude/CLAUDE.md"
    assert canonical_file("~bob/x.txt", "/home/u/app", PROJECTS, home="/home/u") is None


@pytest.mark.parametrize(
    ("path", "cwd", "key"),
    [
        # An anonymised transcript: both stripped of the same leading folders (issue 33).
        ("work/app/src/a.py", "work/app", "work/app/src/a.py"),
        ("app/src/a.py", "work/app", "work/app/app/src/a.py"),  # one folder may be a sub-folder
        ("work/app/src/a.py", "home/u/work/app", "home/u/work/app/src/a.py"),
        ("src/a.py", "work/app", "work/app/src/a.py"),
        ("src/a.py", "/work/app/src", "/work/app/src/src/a.py"),  # absolute cwd: as written
    ],
)
def test_a_relative_path_under_a_relative_cwd_is_not_doubled(path: str, cwd: str, key: str) -> None:
    entity = canonical_file(path, cwd)
    assert entity is not None and entity.key == key


def test_file_entity_keeps_project_and_name() -> None:
    e = canonical_file("../src/a.py", "/home/u/app/docs", [Project("app", "/home/u/app/")])
    assert e is not None
    assert (e.project_id, e.name) == ("app", "a.py")


def test_same_file_three_ways_is_one_key() -> None:
    keys = {
        canonical_file(p, c, PROJECTS).key  # type: ignore[union-attr]
        for p, c in [
            ("src/a.py", "/home/u/app"),
            ("/home/u/app/src/a.py", None),
            ("../src/a.py", "/home/u/app/tests"),
        ]
    }
    assert keys == {"app:src/a.py"}


def test_empty_paths_are_no_entity() -> None:
    assert canonical_file("", "/x") is None
    assert canonical_file(None) is None


def test_windows_paths() -> None:
    assert normalize_path("C:\\Users\\a\\..\\b\\c.py") == "C:/Users/b/c.py"
    assert normalize_path("src\\x.py", "C:\\work") == "C:/work/src/x.py"


def test_as_projects_accepts_pairs_and_sorts_nested_first() -> None:
    projects = as_projects([("outer", "/a/"), Project("inner", "/a/b")])
    assert [p.id for p in projects] == ["inner", "outer"]
    assert projects[1].root == "/a"


# --- commands ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "programs"),
    [
        ("git status", ["git"]),
        ("cd test && uv run pytest -x", ["pytest"]),
        ("FOO=1 BAR=2 env -i X=3 sudo -u root time nohup make all", ["make"]),
        ("git diff HEAD~1 a.py | grep -A5 -B5 'x' 2>&1 || true; ls", ["git", "grep", "ls"]),
        ("echo $(git rev-parse HEAD) > out.txt", ["echo", "git"]),
        # issue 33: a substitution inside a word leaves the word whole
        ("export PYTHONPATH=$PYTHONPATH:$(pwd)/x && python3 -m x.run", ["python3", "pwd"]),
        ("echo $(date) done", ["echo", "date"]),
        ("npx create-next-app@latest my-app --ts", ["create-next-app"]),
        ("npx -y @scope/tool@1.2.3 run && uvx ruff@0.6.1 check", ["tool", "ruff"]),
        ("npm test\nnpm run build", ["npm"]),
        ("for f in *.py; do ruff check $f; done", ["ruff"]),
        ("if [ -f x ]; then make; fi", ["make"]),
        ("(cd sub && make) && ./scripts/run.sh --fast", ["make", "run.sh"]),
        ("python - <<'EOF'\nimport os\nprint(1)\nEOF\nls -la", ["python", "ls"]),
        ("cat <<EOF > f\nrm -rf /\nEOF", ["cat"]),  # a heredoc body is data, not commands
        ("timeout 10 pytest -q", ["pytest"]),
        ("npx tsc --noEmit && uvx ruff check .", ["tsc", "ruff"]),
        ("uv tool install --force .", ["uv"]),
        ("find . -name '*.pyc' -delete 2>/dev/null; xargs -n1 echo", ["find", "echo"]),
        ("/usr/bin/env python3 script.py", ["python3"]),
        ("export A=1; source .venv/bin/activate; pytest", ["pytest"]),
        ("bash -lc 'rg -n foo . | head -5'", ["rg", "head"]),
        ("grep -c x a.txt # trailing comment | not a pipe", ["grep"]),
        ("", []),
    ],
)
def test_command_programs(command: str, programs: list[str]) -> None:
    assert [p for p, _ in command_programs(command)] == programs


def test_argv_commands_unwrap_shells() -> None:
    argv = ["/bin/zsh", "-lc", "sed -n '1,80p' a.ts && sed -n 1p b.ts | wc -l"]
    assert [p for p, _ in command_programs(argv)] == ["sed", "wc"]
    assert [p for p, _ in command_programs(["rg", "--files"])] == ["rg"]


def test_unparseable_command_falls_back_to_first_word() -> None:
    assert [p for p, _ in command_programs('echo "unclosed quote')] == ["echo"]
    assert [p for p, _ in command_programs("sudo 'pytest -x")] == ["pytest"]


def test_command_entities_keep_the_raw_segment() -> None:
    entities = canonical_commands("cd /tmp && FOO=1 pytest -k slow | tee log")
    assert [(e.kind, e.key) for e in entities] == [("command", "pytest"), ("command", "tee")]
    assert entities[0].raw == "FOO=1 pytest -k slow"


# --- tools and URLs ----------------------------------------------------------------------------


def test_tools() -> None:
    assert canonical_tool("Bash").key == "bash"
    e = canonical_tool("mcp__claude_ai_Notion__notion-search")
    assert (e.kind, e.key) == ("tool", "mcp:claude_ai_notion:notion-search")
    assert e.raw == "mcp__claude_ai_Notion__notion-search"


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("HTTPS://Example.COM:443/a/./b/../c?b=2&a=1#frag", "https://example.com/a/c?a=1&b=2"),
        ("https://user:pw@example.com/x?utm_source=t&id=3", "https://example.com/x?id=3"),
        ("http://localhost:8080", "http://localhost:8080/"),
        ("example.com/docs/", "https://example.com/docs/"),
    ],
)
def test_urls(url: str, key: str) -> None:
    entity = canonical_url(url)
    assert entity is not None and entity.key == key and entity.raw == url


def test_not_urls() -> None:
    assert canonical_url("not a url") is None
    assert canonical_url("") is None


# --- errors ------------------------------------------------------------------------------------

TRACEBACK = """Traceback (most recent call last):
  File "/Users/a/x.py", line 5, in <module>
ImportError: cannot import name 'load' from 'pkg.parser' (/Users/a/pkg/parser.py)"""


def test_traceback_signature_uses_last_exception_line() -> None:
    sig = error_signature(TRACEBACK)
    assert sig.type == "ImportError"
    assert sig.message == "cannot import name 'load' from 'pkg.parser' (<path>)"


def test_same_failure_twice_same_key_despite_numbers_paths_and_ids() -> None:
    a = canonical_error(
        "Exit code 1\nError: connect ECONNREFUSED 127.0.0.1:5432 at /srv/a/db.py:10 "
        "request 3f2a9c1e-1b2c-4d5e-8f90-aabbccddeeff id deadbeef1234"
    )
    b = canonical_error(
        "Exit code 2\nError: connect ECONNREFUSED 10.0.0.7:6543 at /home/b/db.py:99 "
        "request 11111111-2222-4333-8444-555555555555 id cafebabe9876"
    )
    assert a.key == b.key and a.kind == "error"
    # raw: the line the failure was read from, as it appeared
    assert a.raw == (
        "Error: connect ECONNREFUSED 127.0.0.1:5432 at /srv/a/db.py:10 "
        "request 3f2a9c1e-1b2c-4d5e-8f90-aabbccddeeff id deadbeef1234"
    )


def test_different_failures_differ() -> None:
    a = canonical_error("ModuleNotFoundError: No module named 'foo'")
    b = canonical_error("ImportError: No module named 'foo'")
    c = canonical_error("ModuleNotFoundError: No module named 'bar'")
    assert len({a.key, b.key, c.key}) == 3


@pytest.mark.parametrize(
    ("text", "etype"),
    [
        ("Exit code 127\n/bin/sh: pytest: command not found", "not found"),
        ("fatal: ambiguous argument 'x': unknown revision", "fatal"),
        ("<tool_use_error>File has not been read yet.</tool_use_error>", "tool_use_error"),
        ("Exit code 1\nsomething odd happened", "exit"),
        ("===== 2 failed, 3 passed in 0.51s =====", "pytest"),
        ("E   AssertionError: assert 1 == 2", "AssertionError"),
    ],
)
def test_error_types(text: str, etype: str) -> None:
    assert error_signature(text).type == etype


def test_exit_code_is_read_from_claude_code_output() -> None:
    assert error_signature("Exit code 2\nboom").exit_code == 2


def test_files_a_command_names() -> None:
    from workers.stages.entities import files_in_command

    cwd = "/home/me/repo"
    keys = {
        command: [
            (u.access, u.entity.key)
            for u in files_in_command(command, cwd, [("repo-1", "/home/me/repo")])
        ]
        for command in (
            "git diff -- src/app.py | grep -n foo",
            "ruff check /home/me/repo/src/app.py tests/test_app.py",
            'find . -name "app.py"',
            "pytest -k test_x tests/",
            "echo 1.5 && curl https://example.com/a.json",
            "python -m pkg.main",
        )
    }
    assert keys == {
        "git diff -- src/app.py | grep -n foo": [("name", "repo-1:src/app.py")],
        "ruff check /home/me/repo/src/app.py tests/test_app.py": [
            ("name", "repo-1:src/app.py"),
            ("name", "repo-1:tests/test_app.py"),
        ],
        'find . -name "app.py"': [("read", "repo-1:.")],  # `-name` takes a pattern
        "pytest -k test_x tests/": [("name", "repo-1:tests")],
        "echo 1.5 && curl https://example.com/a.json": [],
        "python -m pkg.main": [],
    }


def test_a_path_with_escaped_or_quoted_spaces_is_one_file() -> None:
    # issue 33: Codex read `/a/Sample\ File.vtt` ten times, and none became a file.
    from workers.stages.entities import files_in_command

    uses = {
        command: [(u.access, u.entity.key) for u in files_in_command(command, "/a")]
        for command in (
            r"wc -l /a/Sample\ File.vtt",
            r"rg -n 'Speaker' /a/Sample\ File.vtt",
            r"sed -n '1,40p' /a/Sample\ File.vtt",
            'cat "./My Notes.md"',
            'cat "hello world"',  # no path in the shape of the word: text
            'grep -r "TODO later" src/',
        )
    }
    assert uses == {
        r"wc -l /a/Sample\ File.vtt": [("read", "/a/Sample File.vtt")],
        r"rg -n 'Speaker' /a/Sample\ File.vtt": [("read", "/a/Sample File.vtt")],
        r"sed -n '1,40p' /a/Sample\ File.vtt": [("read", "/a/Sample File.vtt")],
        'cat "./My Notes.md"': [("read", "/a/My Notes.md")],
        'cat "hello world"': [],
        'grep -r "TODO later" src/': [("read", "/a/src")],
    }
