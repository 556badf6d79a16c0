"""What goes into the lexical index for a row (a bounded search text) and what a query becomes.

Bounded: the BM25 index must not grow with the size of a tool's output. A code chunk or goal
keeps its first `TEXT_CHARS`; a long memory keeps its head, its error lines, the words of its
middle once each, and its tail.
Identifiers in camelCase are indexed whole and in parts (`getUserName get User Name`), in texts
and queries alike, so `user name` finds `getUserName`; snake_case is split by the tokenizer.
"""

from __future__ import annotations

import re

TEXT_CHARS = 8192
MEMORY_HEAD_CHARS = 2048
MEMORY_ERROR_CHARS = 1024
MEMORY_TAIL_CHARS = 1024
# The index keeps no positions, so the middle's words once each, in order, find a long memory by
# a name or value from its middle as the whole text would (bench/memory_search.py): about
# 600 distinct words of 16 KB of prose fit.
MEMORY_WORDS_CHARS = 4096

# English function words: in an OR query each one matches most rows and only adds cost.
STOPWORDS = frozenset(
    "a about an and are as at be been but by can could did do does for from had has have how "
    "i if in into is it its me my no not of on or our so than that the their them then there "
    "these they this those to us was we were what when where which while who why will with "
    "would you your".split()
)
_ERROR_LINE = re.compile(
    r"error|exception|traceback|failed|failure|fatal|panic|denied|not found", re.IGNORECASE
)
_CAMEL = re.compile(r"\b[A-Za-z][a-z0-9]*[A-Z][A-Za-z0-9]*\b")
_HUMPS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
# A word as the index's tokenizer cuts it (letters and digits; `_` separates): each query word
# is one term, never a phrase (the index keeps no positions).
_WORD = re.compile(r"[^\W_]+")
# A file named in a query: a name with an extension, optionally with directories before it.
_FILE = re.compile(r"(?<![\w.-])(?:[\w.-]+/)*([\w-][\w.-]*\.[A-Za-z][A-Za-z0-9]{0,9})\b")


def keywords(query: str) -> str:
    """The query for BM25: its words minus function words (all of them if nothing is left)."""
    words = query.split()
    kept = [w for w in words if w.lower().strip("?!.,;:'\"") not in STOPWORDS]
    return " ".join(kept or words)


def split_identifiers(text: str) -> str:
    """camelCase identifiers followed by their parts."""
    return _CAMEL.sub(lambda m: f"{m[0]} {' '.join(_HUMPS.findall(m[0]))}", text)


def query_terms(query: str) -> list[str]:
    """The words of a query for the lexical index: function words dropped, identifiers split,
    lowercased (the query language's operators are upper case), nothing but word characters."""
    return [w.lower() for w in _WORD.findall(split_identifiers(keywords(query)))]


def named_files(query: str) -> list[str]:
    """Base names (lowercase) of what may be files named in a query, e.g. `responses.py`. A
    word that only looks like one (`e.g`, `os.path`) names no row, so it changes nothing."""
    found: list[str] = []
    for m in _FILE.finditer(query):
        if m[1].lower() not in found:
            found.append(m[1].lower())
    return found


def code_text(content: str) -> str:
    return split_identifiers(content[:TEXT_CHARS])


def memory_text(content: str) -> str:
    """Head, the error lines of the middle, the middle's other words once each, and tail of a
    long memory."""
    if len(content) <= MEMORY_HEAD_CHARS + MEMORY_ERROR_CHARS + MEMORY_TAIL_CHARS:
        return split_identifiers(content)
    head = content[:MEMORY_HEAD_CHARS]
    tail = content[-MEMORY_TAIL_CHARS:]
    middle = content[MEMORY_HEAD_CHARS:-MEMORY_TAIL_CHARS]
    errors: list[str] = []
    budget = MEMORY_ERROR_CHARS
    for line in middle.splitlines():
        if budget <= 0:
            break
        if _ERROR_LINE.search(line):
            errors.append(line[:budget])
            budget -= len(errors[-1])
    seen = {w.lower() for w in _WORD.findall("\n".join([head, *errors, tail]))} | STOPWORDS
    words: list[str] = []
    budget = MEMORY_WORDS_CHARS
    for word in _WORD.findall(middle):
        if budget < len(word):
            break
        if word.lower() not in seen:
            seen.add(word.lower())
            words.append(word)
            budget -= len(word) + 1
    return split_identifiers("\n".join([head, *errors, " ".join(words), tail]))
