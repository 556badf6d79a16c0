"""`memoryd ui` in a real browser (Debian's chromium, headless, driven by playwright): two
indexed repos and two real transcripts, each page showing exactly their rows, a forget through
the page removing what its preview listed, and the page refusing strangers. Screenshots of each
page (1280×800) go to $MEMORYD_UI_SCREENSHOTS (default: /tmp/memoryd-ui-screenshots)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx
import pytest
import pytest_asyncio

from memoryd import channel
from memoryd.agent.present_graph import short_key
from memoryd.client import Client, connect
from memoryd.daemon.runtime import Runtime
from memoryd.embedding import Embedder
from memoryd.results import Related, SearchRequest
from memoryd.ui import UI_QUERY
from memoryd.ui.app import COOKIE, CSP, UiApp
from memoryd.ui.pages import RELATIONS, when
from memoryd.vocabulary import EDGES
from tests.conftest import (
    MEMORYD,
    _serving,
    cli,
    copy_data_dir,
    external_redis_worker,
    git,
    git_init,
    index_tree,
    orphaned_by,
)
from tests.fixtures import S37, SMALL
from tests.test_agents import clean_env
from tests.test_codegraph import ARQ
from tests.test_codegraph_cochange import _counted
from tests.test_forget_scopes import RENDERER, _world

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = Path(os.environ.get("MEMORYD_UI_SCREENSHOTS", "/tmp/memoryd-ui-screenshots"))
EVER = datetime.fromtimestamp(0, UTC)
# The browser's first-contentful-paint of the page, waited for (it is recorded after the load).
FIRST_PAINT = """new Promise(done => new PerformanceObserver(list => {
    const paint = list.getEntriesByName('first-contentful-paint')[0];
    if (paint) done(paint.startTime);
}).observe({type: 'paint', buffered: true}))"""
PROMPT = "how does generate_html build the page?"


def _chromium() -> str:
    """Debian's chromium, installed when missing and this runs as root with apt-get (as
    .ci/run installs systemd); else the tests skip, saying why."""
    if not os.path.exists(CHROMIUM) and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(
            "apt-get update -qq && apt-get install -y -qq chromium",
            shell=True,
            check=False,
            capture_output=True,
            timeout=900,
        )
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} missing and not installable here (needs root and apt-get)")
    return CHROMIUM


@pytest.fixture(scope="module")
def built_world(
    embedder: Embedder, short_tmp: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path]:
    """The indexed repos and transcripts, a note and a hook's injection: the repo and a data
    dir holding the rest, built once for the module (most of each test's time); each test
    serves a copy of the data dir (`world_stack`), so none sees what another changed."""
    folder, built = tmp_path_factory.mktemp("world"), Path(tempfile.mkdtemp(dir=short_tmp))

    async def build() -> Path:
        async with _serving(built, embedder, scheduled=False) as rt:
            client, repo, _beta = await _world(rt, folder)
            project = (await client.scope(repo)).project
            assert project is not None
            note = f"renderer.py builds HTML by hand: {RENDERER}"
            await client.remember(note, "decision", cwd=repo, project=project)
            stdin = json.dumps({"session_id": "live-session", "cwd": str(repo), "prompt": PROMPT})
            assert await client.hook("claude-code", "user-prompt-submit", stdin, str(repo))
            return repo

    return asyncio.run(build()), built


@pytest_asyncio.fixture
async def world_stack(
    data_dir: Path, embedder: Embedder, built_world: tuple[Path, Path]
) -> AsyncIterator[Runtime]:
    """`stack` on a copy of the built world's data dir."""
    copy_data_dir(built_world[1], data_dir)
    async with _serving(data_dir, embedder, scheduled=False) as rt:
        yield rt


@pytest_asyncio.fixture
async def world(
    world_stack: Runtime, built_world: tuple[Path, Path]
) -> AsyncIterator[tuple[Client, Path, str]]:
    """A client of the world's stack, its repo, and the page's URL."""
    url = await channel.ask(world_stack.settings.channel_socket, UI_QUERY, (0,), 60)
    yield Client(world_stack.redis, world_stack.settings), built_world[0], url


@pytest_asyncio.fixture
async def browser() -> AsyncIterator[Any]:
    executable = _chromium()
    pw_api = pytest.importorskip("playwright.async_api")
    async with pw_api.async_playwright() as pw:
        launched = await pw.chromium.launch(executable_path=executable, args=ARGS)
        try:
            yield launched
        finally:
            await launched.close()


async def _rows(page: Any, table: str) -> list[list[str]]:
    cells: list[list[str]] = await page.eval_on_selector_all(
        f"#{table} tbody tr",
        "rows => rows.map(r => [...r.cells].map(c => c.innerText.trim()))",
    )
    return cells


async def _shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SHOTS / f"{name}.png"))


async def _submit(page: Any, button: str) -> None:
    """Click a form's button or a link and wait for the page it leads to (all of it: a file's
    page sends its code graph after the rest)."""
    async with page.expect_navigation():
        await page.click(button)


async def test_each_page_shows_the_rows_of_the_database(
    world_stack: Runtime, world: tuple[Client, Path, str], browser: Any
) -> None:
    assert world_stack.store is not None
    client, repo, url = world
    page = await browser.new_page(viewport={"width": 1280, "height": 800})
    base = "{0.scheme}://{0.netloc}".format(urlsplit(url))

    # Overview: the token traded for the cookie, the address bar left without it.
    await page.goto(url)
    assert page.url == base + "/"
    [cookie] = await page.context.cookies()
    assert (cookie["name"], cookie["httpOnly"], cookie["sameSite"]) == (COOKIE, True, "Strict")
    paint = await asyncio.wait_for(page.evaluate(FIRST_PAINT), 60)
    print(f"overview first contentful paint: {paint:.0f} ms")
    projects = await client.index_progress()
    assert await _rows(page, "projects") == [
        [
            p["name"],
            p["root"],
            "ready",
            f"{p['index']['files_done']}/{p['index']['files_total']}",
            str(p["index"]["chunks"]),
            "0",
        ]
        for p in projects
        if p["index"] is not None
    ]
    counts = await world_stack.store.counts()
    assert await _rows(page, "tables") == [[t, str(n)] for t, n in sorted(counts.items())]
    assert counts["memory"] == 282 + 22 + 1  # the two transcripts and the decision
    caption = await page.inner_text("#plot-memories figcaption")
    assert caption == f"memories stored: {counts['memory']}"
    await _shot(page, "overview")

    # Sessions: both transcripts' sessions, with their agent, project and goals.
    await page.goto(base + "/sessions?days=36500")
    activity = await client.recent_activity(None, EVER)
    shown = await _rows(page, "sessions")
    assert {row[3] for row in shown} >= {S37.stem, SMALL.stem}
    assert shown == [
        [
            when(s["started_at"]),
            s["agent"] or "",
            s["project"] or "",
            s["session"],
            "\n".join(s["goals"]),
        ]
        for s in activity["sessions"]
    ]
    await _shot(page, "sessions")

    # A session: every event on the timeline, in order; a file it touched opens its page.
    await page.click(f"#sessions a[href='/session/{S37.stem}']")
    replay = await client.session(S37.stem)
    timeline = await _rows(page, "timeline")
    assert [row[0] for row in timeline] == [f"#{ev['seq']}" for ev in replay["events"]]
    assert [row[2].split()[0] for row in timeline] == [ev["kind"] for ev in replay["events"]]
    await _shot(page, "session")
    await _submit(page, "#timeline a[href^='/file']")
    assert (await _rows(page, "file-facts"))[0][1] == RENDERER

    # A file: the sessions that touched it and its current chunks.
    renderer = str(repo / RENDERER)
    await page.goto(base + "/file?path=" + renderer)
    history = await client.history(renderer)
    assert await _rows(page, "file-chunks") == [
        [f"{c['start_line']}-{c['end_line']}", c["chunk_type"], c.get("name") or ""]
        for c in history["chunks"]
    ]
    assert [r[0] for r in await _rows(page, "file-sessions")] == [
        s["session"] for s in history["sessions"]
    ]
    await _shot(page, "file-sessions")

    # Search: the hits of the hybrid search; a hit opens its record.
    await page.goto(base + "/search?q=generate_html&kind=code")
    hits = (await client.search(SearchRequest("generate_html", limit=20))).hits
    found = await _rows(page, "hits")
    assert [row[0] for row in found] == [f"code:{h.id}" for h in hits]
    assert found[0][2] == f"{RENDERER}:1-2"
    where = "#hits tbody tr:first-child td:nth-child(3) a"
    path = f"{hits[0].project}:{RENDERER}"
    assert await page.get_attribute(where, "href") == "/file?" + urlencode({"path": path})
    await _shot(page, "search")
    await page.click("#hits tbody tr:first-child a")
    assert "def generate_html(messages):" in await page.inner_text("#record-text")
    await _shot(page, "record")

    # Memory you control: the decision, what the hook injected, capture on.
    project = (await client.scope(repo)).project
    await page.goto(f"{base}/memory?project={project}")
    notes = (await client.recent_activity(project, EVER))["notes"]
    assert [row[:4] for row in await _rows(page, "notes")] == [
        [n["id"], n["kind"], when(n["event_time"]), n["text"]] for n in notes
    ]
    assert [n["kind"] for n in notes] == ["decision"]
    [injected] = await client.injections()
    assert await _rows(page, "injected") == [
        [when(injected["at"]), "claude-code", "live-session", "UserPromptSubmit", injected["text"]]
    ]
    assert injected["text"].startswith("memoryd: earlier work related to this prompt")
    assert await page.inner_text("#capture") == "Capture is on. pause"
    await _shot(page, "memory")

    # Pause and resume through the page: POSTs the daemon acts on.
    await _submit(page, "#capture button")
    assert (await client.status())["paused_since"] is not None
    assert (await page.inner_text("#capture")).startswith("Capture paused since")
    await _submit(page, "#capture button")
    assert (await client.status())["paused_since"] is None
    await page.close()


async def test_forget_through_the_page_removes_what_the_preview_listed(
    world_stack: Runtime, world: tuple[Client, Path, str], browser: Any
) -> None:
    assert world_stack.store is not None
    client, _repo, url = world
    page = await browser.new_page(viewport={"width": 1280, "height": 800})
    await page.goto(url)
    before = await world_stack.store.dump()
    await page.goto(page.url + "memory")
    await page.select_option("#forget-form select[name=scope]", "session")
    await page.fill("#forget-form input[name=value]", SMALL.stem)
    await _submit(page, "#forget-form button")
    preview = {t: int(n) for t, n in await _rows(page, "preview")}
    assert await page.inner_text("#preview-sessions") == SMALL.stem
    # The preview deleted nothing.
    assert await world_stack.store.dump() == before
    assert preview["memory"] == 22
    await _shot(page, "forget-preview")

    await _submit(page, "main form button")
    removed = {t: int(n) for t, n in await _rows(page, "removed")}
    after = await world_stack.store.dump()
    gone = {
        table: {str(r["id"].id) for r in rows} - {str(r["id"].id) for r in after.get(table, [])}
        for table, rows in before.items()
    }
    gone = {table: keys for table, keys in gone.items() if keys}
    # Exactly the preview's rows went, their edges, and the entities (files, commands) only
    # they pointed at, as the preview says; the blobs of long texts are storage, not rows.
    edges = {edge.table for edge in EDGES}
    rows = {t: keys for t, keys in gone.items() if t not in edges | {"entity", "blob"}}
    assert {t: len(keys) for t, keys in rows.items()} == preview
    doomed = {(t, key) for t, keys in rows.items() for key in keys}
    orphans = orphaned_by(before, doomed) - orphaned_by(before, set())
    assert gone.get("entity", set()) == orphans
    ends = doomed | {("entity", key) for key in orphans}
    assert {t: keys for t, keys in gone.items() if t in edges} == {
        table: keys
        for table in edges
        if (
            keys := {
                str(e["id"].id)
                for e in before.get(table, [])
                if {(e["in"].table_name, str(e["in"].id)), (e["out"].table_name, str(e["out"].id))}
                & ends
            }
        )
    }
    assert removed == preview | ({"entity": len(orphans)} if orphans else {})
    # Gone from the search indexes too: the session's own words find none of it.
    for memory in [m for m in before["memory"] if m["session"].id == SMALL.stem][:5]:
        words = " ".join(str(memory.get("content") or "").split()[:8])
        if words:
            hits = (await client.search(SearchRequest(words, ("memory",), limit=50))).hits
            assert all(h.session != SMALL.stem for h in hits)
    await _shot(page, "forgotten")
    await page.close()


async def test_strangers_are_refused(
    world_stack: Runtime, world: tuple[Client, Path, str], browser: Any
) -> None:
    client, _repo, url = world
    base = "{0.scheme}://{0.netloc}".format(urlsplit(url))
    host = urlsplit(url).netloc
    # `memoryd ui` gives the address of the page the daemon serves already.
    # (In a thread: the daemon answering it runs on this test's event loop.)
    asked = ("ui", "--no-open", "--data-dir", str(world_stack.settings.data_dir))
    printed = (await asyncio.to_thread(cli, *asked)).stdout
    assert printed == url + "\n"
    async with httpx.AsyncClient(base_url=base) as stranger:
        # No cookie, no token; a wrong token.
        assert (await stranger.get("/")).status_code == 401
        assert (await stranger.get("/?token=wrong")).status_code == 401
    async with httpx.AsyncClient(base_url=base) as http:
        signed = await http.get(url)  # the token, traded for the cookie
        assert signed.status_code == 303
        assert COOKIE in http.cookies
        page = await http.get("/")
        assert page.status_code == 200
        assert page.headers["content-security-policy"] == CSP
        # A foreign Origin, a foreign Host (DNS rebinding).
        foreign = {"origin": "http://evil.example"}
        assert (await http.get("/", headers=foreign)).status_code == 403
        rebound = {"host": "evil.example:" + host.split(":")[1]}
        assert (await http.get("/", headers=rebound)).status_code == 421
        # A POST without the CSRF token, or with a wrong one: refused, nothing paused.
        origin = {"origin": base}
        for form in ({}, {"csrf": "forged"}):
            refused = await http.post("/pause", headers=origin, data=form)
            assert refused.status_code == 403
        # The real token from a page, but from a foreign Origin.
        memory = await http.get("/memory")
        csrf = memory.text.split('name="csrf" value="')[1].split('"')[0]
        refused = await http.post("/pause", headers=foreign, data={"csrf": csrf})
        assert refused.status_code == 403
        assert (await client.status())["paused_since"] is None
        # The same POST from the page's own origin goes through.
        done = await http.post("/pause", headers=origin, data={"csrf": csrf})
        assert done.status_code == 303
        assert (await client.status())["paused_since"] is not None
    # A browser without the cookie sees the refusal.
    page = await browser.new_page()
    response = await page.goto(base + "/sessions")
    assert response.status == 401
    await page.close()


def _related_rows(doc: Related) -> list[list[str]]:
    """The rows the file page's `related` table must show for this answer of the client."""
    return [
        [
            label,
            short_key(x["key"]),
            f"{x['path']}:{x['line']}",
            "" if x["confidence"] >= 1 else f"guess {x['confidence']:.2f}",
        ]
        for name, label in RELATIONS
        for x in doc[name]  # type: ignore[literal-required]
    ]


async def test_the_file_page_shows_what_the_file_is_related_to(
    stack: Runtime, tmp_path: Path, browser: Any
) -> None:
    """arq's source (tests/data/arq, MIT) as a repository with two more commits: the page of
    connections.py lists its definitions, callers, callees, importers, imports and bases as
    `related` answers them, and the files that changed with it; each opens its own page."""
    root = tmp_path / "arq-src"
    shutil.copytree(ARQ, root)
    git_init(root)
    for _ in range(2):
        for name in ("arq/connections.py", "arq/worker.py"):
            (root / name).write_text((root / name).read_text() + "\n")
        git(root, "commit", "-q", "-am", "connections and worker together")
    await index_tree(stack, root)
    await _counted(stack, root)
    url = await channel.ask(stack.settings.channel_socket, UI_QUERY, (0,), 60)
    base = "{0.scheme}://{0.netloc}".format(urlsplit(url))
    page = await browser.new_page(viewport={"width": 1280, "height": 800})
    await page.goto(url)
    target = root / "arq/connections.py"
    async with connect(stack.settings) as memoryd:
        doc = await memoryd.related(str(target), cwd=str(root))
        worker = await memoryd.related(str(root / "arq/worker.py"), cwd=str(root))
    await page.goto(base + "/file?path=" + str(target))
    rows = await _rows(page, "related")
    assert rows == _related_rows(doc)
    assert [r for r in rows if r[0] == "imported by"] == [
        ["imported by", "arq/__init__.py", "arq/__init__.py:1", ""],
        ["imported by", "arq/worker.py", "arq/worker.py:19", ""],
    ]
    assert [r for r in rows if r[0] in ("imports", "inherits", "inherited by")][:4] == [
        ["imports", "arq/constants.py", "arq/connections.py:16", ""],
        ["imports", "arq/jobs.py", "arq/connections.py:17", ""],
        ["imports", "arq/utils.py", "arq/connections.py:18", ""],
        ["imports", "python:asyncio", "arq/connections.py:1", ""],
    ]
    assert [r for r in rows if r[0] in ("inherits", "inherited by")] == [
        ["inherits", "arq/connections.py#BaseRedis", "arq/connections.py:89", ""],
        ["inherited by", "arq/connections.py#ArqRedis", "arq/connections.py:89", ""],
    ]
    # What the file does with others first, its own definitions (36 of them) last.
    assert rows[0] == ["called by", "arq/worker.py#Worker.__init__", "arq/worker.py:262", ""]
    assert [r[0] for r in rows[-36:]] == ["defines"] * 36
    assert ["calls", "arq/utils.py#to_unix_ms", "arq/connections.py:164", ""] in rows
    assert ["called by", "arq/worker.py#Worker.run_cron", "arq/worker.py:760", "guess 0.90"] in rows
    # Each end in a project opens its file's page; a standard module is text.
    links = await page.eval_on_selector_all(
        "#related tbody tr td:nth-child(2)",
        "cells => cells.map(c => c.querySelector('a') !== null)",
    )
    assert links == [not r[1].startswith("python:") for r in rows]
    # Every file of the import commit changed with it once (12 sources: 1/3 each), worker.py
    # in the two commits after it as well.
    together = await _rows(page, "changes-with")
    assert together == [
        [c["path"], f"{c['count']:g}", when(c["last_at"])] for c in doc["changes_with"]
    ]
    assert [r[:2] for r in together][:2] == [
        ["arq/worker.py", "2.333"],
        ["arq/__init__.py", "0.333"],
    ]
    assert len(together) == 11
    await _shot(page, "file")
    # A link opens the other file's page, with its own links.
    await _submit(page, "#related a[href*='arq%2Fworker.py']")
    assert (await _rows(page, "file-facts"))[0][1] == "arq/worker.py"
    assert await _rows(page, "related") == _related_rows(worker)
    await page.close()
    # The page is sent in two parts: the file and its sessions first (the browser paints
    # them), the code graph and the chunks once the daemon has read the graph.
    app = UiApp(stack.settings, lambda: connect(stack.settings), PORT)
    first, graph, end = await _sent(app, "/file", {"path": str(target)})
    assert 'id="file-facts"' in first and first.endswith("</tbody></table>")
    assert 'id="file-sessions"' in first and 'id="related"' not in first
    assert graph.startswith('<h2>Related in the code graph</h2><table id="related">')
    assert 'id="changes-with"' in graph and 'id="file-chunks"' in graph
    assert graph.endswith("</main></body></html>")
    assert end == ""


# The port a UiApp called directly (no socket) takes its requests for.
PORT = 8


async def _sent(app: UiApp, path: str, query: dict[str, str]) -> list[str]:
    """The body parts the page's app sends for a signed-in GET, as it sends them."""
    sent: list[str] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            sent.append(message["body"].decode())

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": urlencode(query).encode(),
        "root_path": "",
        "headers": [
            (b"host", f"127.0.0.1:{PORT}".encode()),
            (b"cookie", f"{COOKIE}={app.secret}".encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", PORT),
    }
    await app(scope, receive, send)
    return sent


async def test_with_an_external_redis_and_no_daemon_here_memoryd_ui_serves_the_page(
    data_dir: Path, short_tmp: Path, embedder: Embedder, tmp_path: Path, browser: Any
) -> None:
    """Server mode as far as it runs here (no SurrealDB server, no Docker): workers serve an
    external Redis and no daemon holds this data dir's query channel, so `memoryd ui` serves
    the page itself, reading through the queue, until it is stopped."""
    async with external_redis_worker(data_dir, short_tmp, embedder) as (redis, worker):
        root = tmp_path / "repo"
        root.mkdir()
        (root / "a.py").write_text("def a():\n    return 1\n")
        git_init(root)
        await index_tree(worker, root)
        assert not worker.settings.channel_socket.exists()
        env = clean_env(data_dir, MEMORYD_REDIS_URL=redis.url)
        page_process = subprocess.Popen(
            [MEMORYD, "ui", "--no-open"], env=env, stdout=subprocess.PIPE, text=True
        )
        try:
            assert page_process.stdout is not None
            # (In a thread: the worker answering its queries runs on this event loop.)
            url = (await asyncio.to_thread(page_process.stdout.readline)).strip()
            assert url.startswith("http://127.0.0.1:")
            page = await browser.new_page(viewport={"width": 1280, "height": 800})
            await page.goto(url)
            [project] = await Client(worker.redis, worker.settings).index_progress()
            assert project["index"] is not None
            assert await _rows(page, "projects") == [
                [project["name"], str(root), "ready", "1/1", "1", "0"]
            ]
            await page.goto(url.split("?")[0] + "file?path=" + str(root / "a.py"))
            assert await _rows(page, "file-chunks") == [["1-2", "function", "a"]]
            await page.close()
        finally:
            page_process.terminate()
            page_process.wait(timeout=60)
