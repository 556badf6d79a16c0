"""The code graph as an agent reads it (`related`, `impact`): a head line counting each list,
then one line per neighbour, cut to the budget the way every tool's answer is (present.fit)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memoryd.agent.present import LINE_CHARS, _day
from memoryd.agent_shared import fit, one_line
from memoryd.results import GraphLink, Impact, Related

if TYPE_CHECKING:
    from memoryd.search_related import HitGraph

SECTIONS = (
    ("definitions", "defines"),
    ("callers", "called by"),
    ("callees", "calls"),
    ("importers", "imported by"),
    ("imports", "imports"),
    ("bases", "inherits"),
    ("subclasses", "inherited by"),
)


def short_key(key: str) -> str:
    """A key without its project (`arq/worker.py#Worker.main`); a module's key as it is."""
    head, sep, rest = key.partition(":")
    return rest if sep and "-" in head else key


def _link_line(label: str, link: GraphLink) -> str:
    sure = "" if link["confidence"] >= 1 else f" (guess {link['confidence']:.2f})"
    return one_line(
        f"{label} {short_key(link['key'])}  at {link['path']}:{link['line']}{sure}", LINE_CHARS
    )


def related_text(doc: Related, max_chars: int) -> str:
    target = doc["target"]
    counts = ", ".join(f"{len(doc[name])} {name}" for name, _ in SECTIONS if doc[name])  # type: ignore[literal-required]
    when = f" as of {doc['as_of']}" if doc["as_of"] else ""
    shown = short_key(target["key"])
    head = [f"related {target['kind']} {shown}{when}: {counts or 'no code links'}"]
    lines = [
        _link_line(label, link)
        for name, label in SECTIONS
        for link in doc[name]  # type: ignore[literal-required]
    ]
    lines += [
        f"changes with {c['path']} ({c['count']:g} commits, last {(c['last_at'] or '?')[:10]})"
        for c in doc["changes_with"]
    ]
    lines += [
        one_line(
            f"session {s['session']} {'/'.join(s['verbs'])} {s['path']} at {_day(s['last_at'])}",
            LINE_CHARS,
        )
        for s in doc["sessions"]
    ]
    return fit(head, lines, max_chars, "links")


def impact_text(doc: Impact, max_chars: int) -> str:
    head = [
        f"impact of {', '.join(doc['paths'])} (depth {doc['depth']}): "
        f"{len(doc['dependents'])} dependent files, {len(doc['tests'])} tests, "
        f"{len(doc['failures'])} failures after earlier edits"
    ]
    lines = [
        f"{'test' if d['test'] else 'dependent'} {d['path']} "
        f"({d['via']} {d['of']}, depth {d['depth']})"
        for d in doc["tests"] + doc["dependents"]
    ]
    lines += [
        one_line(
            f"failure after editing {f['path']}: {f['error']} (session {f['session']}, "
            f"{_day(f['at'])})",
            LINE_CHARS,
        )
        for f in doc["failures"]
    ]
    return fit(head, lines, max_chars, "lines")


def hit_lines(graph: HitGraph) -> list[str]:
    """The lines under a search hit (`search --related`), indented: the files its file
    usually changes with, then the callers."""
    lines = [f"  changes with {c['path']} ({c['count']:g} commits)" for c in graph["changes_with"]]
    return lines + ["  " + _link_line("called by", link) for link in graph["callers"]]
