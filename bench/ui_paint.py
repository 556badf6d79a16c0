"""How soon each page of `memoryd ui` paints, on a database of a project with `--rows` rows.

    .venv/bin/python -m bench.ui_paint [--rows 100000] [--runs 5]

1. build: as bench/cli_latency.py builds it (synthetic code files written as the index job
   writes them, no vectors) and a small indexed repository (a copy of arq's source);
2. a daemon (`memoryd run`) starts on it; `memoryd ui --no-open` gives the page's address;
3. Debian's chromium (headless, through playwright) signs in with it and loads each page
   (overview, sessions, a file, a search) once to warm up, then `--runs` times, reading the
   browser's own first-contentful-paint, and when the whole page had arrived (its load event:
   the File page sends its code graph after the history the browser paints first).

Prints the median first paint of each page next to the target (300 ms on an idle machine), the
median whole page, and the load average. Numbers only: nothing here asserts a timing. Files
live under /tmp, removed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess

from playwright.async_api import async_playwright

from bench.cli_latency import MEMORYD, fill, index_repo, wait_until_serving, workspace
from bench.fresh_queries import take
from tests.test_ui import ARGS, CHROMIUM, FIRST_PAINT

TARGET_MS = 300
LOADED = "performance.getEntriesByType('navigation')[0].loadEventEnd"


async def paint_times(
    url: str, pages: dict[str, str], runs: int
) -> dict[str, list[tuple[float, float]]]:
    """Per page, (first paint, whole page) of each run, in ms from the navigation's start."""
    base = url.split("/?")[0]
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in pages}
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 800})
            page = await context.new_page()
            await page.goto(url)  # the token traded for the cookie
            for run in range(runs + 1):
                for name, path in pages.items():
                    await page.goto(base + path)  # returns at the load event
                    paint = await asyncio.wait_for(page.evaluate(FIRST_PAINT), 60)
                    if run:  # the first round warms the daemon's caches up
                        times[name].append((paint, await page.evaluate(LOADED)))
        finally:
            await browser.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    work, data_dir, repo, env = workspace("md-ui-")
    daemon = None
    try:
        rows = asyncio.run(fill(data_dir, args.rows))
        print(f"build: {rows} rows in {data_dir}")
        daemon_log = work / "daemon.log"
        with daemon_log.open("wb") as out:
            daemon = subprocess.Popen([MEMORYD, "run"], env=env, stdout=out, stderr=out)
        asyncio.run(wait_until_serving(data_dir, daemon, daemon_log))
        asyncio.run(index_repo(data_dir, repo))
        ui = [MEMORYD, "ui", "--no-open"]
        url = subprocess.run(ui, env=env, capture_output=True, text=True, check=True).stdout
        pages = {
            "overview": "/",
            "sessions": "/sessions",
            "file": f"/file?path={repo / 'connections.py'}",
            "search": f"/search?q={take(1)[0].replace(' ', '+')}&kind=code",
        }
        load_before = os.getloadavg()
        times = asyncio.run(paint_times(url.strip(), pages, args.runs))
        load_after = os.getloadavg()
        print(f"\n{rows} rows; median of {args.runs} loads; load average (1 min) ", end="")
        print(f"{load_before[0]:.2f} before, {load_after[0]:.2f} after, on {os.cpu_count()} cpus")
        for name, found in times.items():
            paint, whole = (statistics.median(x) for x in zip(*found, strict=True))
            print(
                f"  {name:<10} first paint {paint:5.0f} ms  target <= {TARGET_MS} ms"
                f"   (whole page {whole:5.0f} ms)"
            )
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
