"""How much of a real code index redaction touches: the share of chunks it changes.

    .venv/bin/python bench/redaction_share.py [--packages pip rich ...] [--examples 40]

The tree is installed packages copied whole (their data and test files too) to a temp dir and
`git init`-ed: code nobody here wrote. Every file indexing would read is planned as indexing
plans it (`secret_files`, `read_source`, `plan_file`: redaction, then chunking); a chunk is
changed when any of its lines differs from the file's own (redaction keeps lines in place).
Prints the share of chunks changed, the markers by type, files kept out by `secret_files`,
what redaction costs, and the changed lines themselves (to judge what was redacted: library
code has few real secrets, so most of them show where the detector over-reaches).
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

from memoryd.config import DEFAULT_SECRET_FILES
from memoryd.scan import read_source, secret_file, walk
from workers.indexing import plan_file
from workers.stages.chunking import chunk_text, language_for_path
from workers.stages.redact import SecretMemory, redact

PACKAGES = (
    "huggingface_hub",
    "pip",
    "aiohttp",
    "rich",
    "redis",
    "pydantic",
    "urllib3",
    "jsonschema",
    "detect_secrets",
    "_pytest",
    "httpx",
    "click",
)
_MARKER = "[REDACTED:"


def build_tree(target: Path, packages: list[str]) -> None:
    for name in packages:
        source = Path(importlib.import_module(name).__file__ or "").parent
        shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__"))
    for args in (["init", "-q", "-b", "main"], ["add", "-A"]):
        subprocess.run(["git", "-C", str(target), *args], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--packages", nargs="+", default=list(PACKAGES))
    parser.add_argument("--examples", type=int, default=40, help="changed lines to print")
    parser.add_argument("--max-chars", type=int, default=1500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="md-redact-") as tmp:
        root = Path(tmp) / "tree"
        build_tree(root, args.packages)
        files = chunks = changed = 0
        text_bytes = 0
        kept_out: Counter[str] = Counter()
        markers: Counter[str] = Counter()
        changed_files: Counter[str] = Counter()
        examples: list[str] = []
        redact_seconds = chunk_seconds = 0.0
        for rel in walk(root):
            reason = secret_file(rel, DEFAULT_SECRET_FILES)
            if reason is not None:
                kept_out[reason] += 1
                continue
            path = root / rel
            if not path.is_file() or path.stat().st_size > 2_000_000:
                continue
            content = read_source(path.read_bytes())
            if content.text is None:
                continue
            files += 1
            text_bytes += len(content.text)
            started = time.perf_counter()
            redacted = redact(content.text, SecretMemory(rel))
            redact_seconds += time.perf_counter() - started
            started = time.perf_counter()
            chunk_text(content.text, language_for_path(rel), max_chars=args.max_chars)
            chunk_seconds += time.perf_counter() - started
            plan = plan_file("bench", rel, content.text, content.hash, args.max_chars)
            chunks += len(plan.chunks)
            if redacted == content.text:
                continue
            raw_lines, red_lines = content.text.split("\n"), redacted.split("\n")
            assert len(raw_lines) == len(red_lines), rel  # redaction never moves a line
            differ = {
                i for i, (a, b) in enumerate(zip(raw_lines, red_lines, strict=True)) if a != b
            }
            for chunk in plan.chunks:
                if differ & set(range(chunk["start_line"] - 1, chunk["end_line"])):
                    changed += 1
                    changed_files[rel] += 1
            for i in sorted(differ):
                for kind in red_lines[i].split(_MARKER)[1:]:
                    markers[kind.split("]", 1)[0]] += 1
                if len(examples) < args.examples:
                    examples.append(f"{rel}:{i + 1}: {red_lines[i].strip()[:150]}")
    print(f"packages: {' '.join(args.packages)}")
    print(f"files planned: {files} ({text_bytes / 1e6:.1f} MB of text), chunks: {chunks}")
    print(
        f"chunks changed by redaction: {changed} = {100 * changed / max(chunks, 1):.2f}% "
        f"(in {len(changed_files)} files)"
    )
    print(f"markers by type: {dict(markers.most_common())}")
    print(f"kept out by secret_files: {sum(kept_out.values())} {dict(kept_out)}")
    print(
        f"redaction: {redact_seconds:.1f} s ({text_bytes / 1e6 / max(redact_seconds, 1e-9):.1f} "
        f"MB/s), chunking alone: {chunk_seconds:.1f} s"
    )
    print("changed lines:")
    for line in examples:
        print("  " + line)


if __name__ == "__main__":
    main()
