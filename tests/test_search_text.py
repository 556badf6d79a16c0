"""The lexical index's text of a memory: bounded, and still holding the words of its middle."""

from __future__ import annotations

from memoryd.searchindex.text import (
    MEMORY_ERROR_CHARS,
    MEMORY_HEAD_CHARS,
    MEMORY_TAIL_CHARS,
    MEMORY_WORDS_CHARS,
    memory_text,
)


def test_a_word_of_a_long_memorys_middle_is_indexed_once() -> None:
    head = "Here is the plan for the release.\n" * 80
    middle = "The cache lives in lru_store and repeats repeats repeats.\n" * 100
    tail = "That is all for now.\n" * 60
    text = memory_text(head + middle + "Then call rotateSigningKeys after.\n" + middle + tail)
    words = text.split()
    # A word only the middle holds: found, with its camelCase parts, and once.
    assert words.count("rotateSigningKeys") == 1
    assert {"rotate", "Signing", "Keys"} <= set(words)
    assert words.count("lru") == 1  # snake_case in parts, as the index's tokenizer cuts it
    assert words.count("repeats") == 1


def test_the_text_of_a_huge_memory_stays_bounded() -> None:
    huge = "\n".join(f"value{i} failed in step{i}" for i in range(100_000))
    text = memory_text(huge)
    bound = MEMORY_HEAD_CHARS + MEMORY_ERROR_CHARS + MEMORY_WORDS_CHARS + MEMORY_TAIL_CHARS
    assert len(text) <= bound + 100  # and the newlines between the lines kept
    assert "value99999" in text  # the tail
