"""Line splitting and defensive JSON decoding of transcript lines."""

from __future__ import annotations

import io
import json

from tests.fixtures import BIG_LINE
from workers.stages.transcripts.lines import (
    Line,
    decode_line,
    fix_surrogates,
    read_lines,
    split_lines,
)

REC_A = {"type": "user", "uuid": "a", "message": {"content": "hello"}}
REC_B = {"type": "assistant", "uuid": "b", "message": {"content": "hi"}}


def _line(data: bytes, offset: int = 0) -> Line:
    return Line(offset, data)


def _dumps(rec: dict) -> bytes:
    return json.dumps(rec).encode()


# --- split_lines / read_lines ------------------------------------------------------------------


def test_split_lines_stops_at_last_newline_and_keeps_offsets() -> None:
    buf = b'{"a":1}\n{"b":2}\n{"c":'
    lines, next_offset = split_lines(buf, 100)
    assert [ln.raw for ln in lines] == [b'{"a":1}', b'{"b":2}']
    assert [ln.offset for ln in lines] == [100, 108]
    assert lines[1].end == 116
    assert next_offset == 116  # the unterminated '{"c":' is left for the next read


def test_split_lines_without_newline_consumes_nothing() -> None:
    assert split_lines(b'{"partial": tr', 42) == ([], 42)


def test_split_lines_marks_oversize_lines_but_advances() -> None:
    buf = b"x" * 50 + b"\n" + b"{}\n"
    lines, next_offset = split_lines(buf, 0, max_line=10)
    assert lines[0].raw == b"" and lines[0].oversize == 50
    assert lines[0].end == 51 and lines[1].offset == 51
    assert next_offset == len(buf)
    assert "too long" in decode_line(lines[0]).skipped[0].reason


def test_read_lines_streams_past_huge_lines_and_leaves_the_tail() -> None:
    data = b'{"a":1}\n' + b"y" * 5000 + b'\n{"b":2}\n{"tail":'
    lines, next_offset = read_lines(io.BytesIO(data), 0, max_line=1000, chunk_size=64)
    assert [ln.oversize for ln in lines] == [0, 5000, 0]
    assert lines[2].raw == b'{"b":2}'
    assert next_offset == data.index(b'{"tail"')


def test_read_lines_from_an_offset_and_in_bounded_batches() -> None:
    data = b"".join(b'{"n":%d}\n' % i for i in range(100))
    first, offset = read_lines(io.BytesIO(data), 0, max_bytes=50, chunk_size=16)
    assert first and offset < len(data)
    rest, end = read_lines(io.BytesIO(data), offset, max_bytes=10**9)
    assert end == len(data)
    numbers = [json.loads(ln.raw)["n"] for ln in first + rest]
    assert numbers == list(range(100))


def test_read_lines_matches_split_lines_on_a_real_transcript() -> None:
    data = BIG_LINE.read_bytes()
    with BIG_LINE.open("rb") as f:
        streamed, offset = read_lines(f, 0, chunk_size=4096)
    whole, whole_offset = split_lines(data, 0)
    assert streamed == whole and offset == whole_offset == len(data)


# --- decode_line -------------------------------------------------------------------------------


def test_decode_plain_record() -> None:
    d = decode_line(_line(_dumps(REC_A)))
    assert d.records == (REC_A,) and d.skipped == ()


def test_blank_line_is_ignored_silently() -> None:
    d = decode_line(_line(b"   "))
    assert d.records == () and d.skipped == ()


def test_nul_bytes_are_stripped() -> None:
    d = decode_line(_line(b"\x00" * 300 + _dumps(REC_A) + b"\x00\x00"))
    assert d.records == (REC_A,) and d.skipped == ()


def test_only_nul_bytes_is_reported() -> None:
    d = decode_line(_line(b"\x00" * 64, offset=7))
    assert d.records == ()
    assert d.skipped[0].reason == "only NUL bytes" and d.skipped[0].offset == 7


def test_byte_order_mark_is_ignored() -> None:
    d = decode_line(_line(b"\xef\xbb\xbf" + _dumps(REC_A)))
    assert d.records == (REC_A,) and d.skipped == ()


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    raw = b'{"type":"user","uuid":"u","message":{"content":"caf\xc3 \xff\xfe ok"}}'
    (rec,) = decode_line(_line(raw)).records
    assert rec["message"]["content"] == "caf\ufffd \ufffd\ufffd ok"


def test_lone_surrogates_are_replaced_so_text_encodes() -> None:
    raw = (
        b'{"type":"user","uuid":"u","message":{"content":"cut \\ud83d here, pair \\ud83d\\ude00"}}'
    )
    (rec,) = decode_line(_line(raw)).records
    text = rec["message"]["content"]
    assert text == "cut \ufffd here, pair \U0001f600"
    text.encode("utf-8")  # must not raise


def test_fix_surrogates_leaves_valid_text_alone() -> None:
    assert fix_surrogates("plain ✓") == "plain ✓"
    assert fix_surrogates("a\udc80b") == "a\ufffdb"


def test_two_records_glued_on_one_line() -> None:
    d = decode_line(_line(_dumps(REC_A) + _dumps(REC_B)))
    assert d.records == (REC_A, REC_B) and d.skipped == ()


def test_truncated_stub_glued_to_next_record_is_salvaged() -> None:
    stub = b'{"parentUuid":"p","type":"user","message":{"content":[{"type":"text","text":"prNu'
    d = decode_line(_line(stub + _dumps(REC_B), offset=99))
    assert d.records == (REC_B,)
    assert len(d.skipped) == 1
    assert d.skipped[0].offset == 99 and "corrupt" in d.skipped[0].reason
    assert d.skipped[0].excerpt.startswith('{"parentUuid"')


def test_nested_objects_inside_a_stub_are_not_taken_for_records() -> None:
    # The stub holds a complete nested block with a "type" key; it must not be salvaged.
    stub = b'{"type":"assistant","message":{"content":[{"type":"text","text":"hi"}],"id":"tru'
    d = decode_line(_line(stub + _dumps(REC_A)))
    assert d.records == (REC_A,)


def test_garbage_is_reported_as_invalid_json() -> None:
    d = decode_line(_line(b"this is not json"))
    assert d.records == () and d.skipped[0].reason == "invalid JSON"


def test_non_object_json_is_reported() -> None:
    d = decode_line(_line(b"[1, 2, 3]"))
    assert d.records == () and d.skipped[0].reason == "not a JSON object"


def test_one_megabyte_line_of_the_fixture_decodes() -> None:
    lines, _ = split_lines(BIG_LINE.read_bytes(), 0)
    big = max(lines, key=lambda ln: len(ln.raw))
    assert big.end - big.offset == 1_046_941  # the line, newline included
    (rec,) = decode_line(big).records
    assert rec["type"] == "user"


def test_a_line_nested_100000_deep_is_one_bad_line() -> None:
    deep = b'{"type":"user","message":' + b'{"a":' * 100_000 + b"1" + b"}" * 100_001
    decoded = decode_line(_line(deep, 7))
    assert decoded.records == ()
    assert [(s.offset, s.reason) for s in decoded.skipped] == [(7, "JSON nested too deep")]


def test_each_parser_skips_a_line_nested_too_deep_and_keeps_the_rest() -> None:
    from workers.stages.transcripts import parser_for
    from workers.stages.transcripts.events import Memory, Source

    deep = b"{" + b'"a":{' * 100_000 + b"}" * 100_001
    claude = {"type": "user", "sessionId": "s", "cwd": "/p", "timestamp": "2026-01-01T00:00:00Z"}
    first = {**claude, "uuid": "u1", "message": {"role": "user", "content": "fix the login bug"}}
    second = {**claude, "uuid": "u2", "message": {"role": "user", "content": "and the logout"}}
    gemini_meta = {"sessionId": "s", "projectHash": "h", "startTime": "2026-01-01T00:00:00Z"}
    gemini = [
        gemini_meta,
        {"id": "m1", "type": "user", "content": "fix the login bug"},
        {"id": "m2", "type": "user", "content": "and the logout"},
    ]
    for agent, records in (("claude-code", [first, second]), ("gemini", gemini)):
        lines, _ = split_lines(
            b"\n".join([_dumps(records[0]), deep, *map(_dumps, records[1:])]) + b"\n", 0
        )
        result = parser_for(agent).parse(lines, None, Source.of("t.jsonl"))
        prompts = [e.content for e in result.events if isinstance(e, Memory)]
        assert prompts == ["fix the login bug", "and the logout"], agent
        assert [s.offset for s in result.skipped] == [lines[1].offset], agent
