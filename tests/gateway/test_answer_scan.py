""":class:`igw.gateway.answer_scan.AnswerScan`: an answer's usage and stored-response id read from its
bytes in pieces, whatever the pieces, as a whole parse of the answer reads them."""

from __future__ import annotations

import random

import orjson
import pytest

from igw.gateway import answer_scan
from igw.gateway.answer_scan import MAX_VALUE_BYTES, AnswerScan

RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "output": [
        {
            "id": "msg_2",
            "type": "message",
            # generated text naming the keys: escaped quotes, never read as keys
            "content": [{"type": "output_text", "text": 'he wrote "usage": {"x": 1} and "id": "no" ' * 500}],
        }
    ],
    "store": True,
    "usage": {"input_tokens": 3, "output_tokens": 9, "input_tokens_details": {"cached_tokens": 0}},
}
COMPLETION = {
    "id": "cmpl-1",
    "object": "text_completion",
    "choices": [{"index": 0, "text": "x" * 100_000}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
    "prompt_logprobs": [{"1": {"logprob": -1.0}}] * 2000,  # after the usage (vLLM's order)
}


def _scanned(data: bytes, sizes: list[int], rng: random.Random) -> dict[str, object]:
    scan = AnswerScan()
    at = 0
    while at < len(data):
        size = rng.choice(sizes)
        scan.feed(data[at : at + size])
        at += size
    return scan.document()


@pytest.mark.parametrize("doc", [RESPONSE, COMPLETION], ids=["responses", "completion"])
@pytest.mark.parametrize("indent", [False, True], ids=["compact", "indented"])
def test_the_fields_are_read_whatever_the_pieces(doc: dict[str, object], indent: bool) -> None:
    data = orjson.dumps(doc, option=orjson.OPT_INDENT_2 if indent else 0)
    expected = {key: doc[key] for key in ("id", "object", "usage", "store") if key in doc}
    rng = random.Random(7)
    for _ in range(20):
        assert _scanned(data, [1, 2, 3, 7, 50, 4096, 70_000], rng) == expected
    assert _scanned(data, [len(data)], rng) == expected


def test_a_value_longer_than_the_bound_is_skipped() -> None:
    data = orjson.dumps({"id": "x" * MAX_VALUE_BYTES, "usage": {"prompt_tokens": 1}})
    assert _scanned(data, [1000], random.Random(1)) == {"usage": {"prompt_tokens": 1}}


def test_an_answer_that_is_not_json_yields_nothing() -> None:
    assert _scanned(b"usage: id: object:" * 1000, [100], random.Random(1)) == {}


def test_a_value_nested_past_the_parsers_bound_is_no_value() -> None:
    """Before session s43 ``RecursionError`` left the scan (and the relay: a 500 ``internal_error``
    with a traceback, or a connection cut mid-answer); now such a value is skipped and a later
    ``usage`` still read."""
    deep = b'{"usage": ' + b"[" * 20_000 + b"]" * 20_000 + b', "usage": {"prompt_tokens": 2}}'
    for size in (len(deep), 4096):
        assert _scanned(deep, [size], random.Random(1)) == {"usage": {"prompt_tokens": 2}}


@pytest.mark.parametrize(
    "hostile",
    [b' "usage": [' * 6000, b'{"usage": ' * 6000, b' "usage": {"a": "' * 4000],
    ids=["keys-in-an-array", "nested-keys", "unterminated-strings"],
)
@pytest.mark.parametrize("size", [65_536, 1000])
def test_the_parsing_is_bounded_by_the_answers_size(
    monkeypatch: pytest.MonkeyPatch, hostile: bytes, size: int
) -> None:
    """An answer that repeats a key without a readable value: before session s43 each key found
    parsed every value still pending again (up to 16 KiB each), 23 s of the event loop for one MiB
    of ``"usage":[``; now the bytes handed to the parser stay within the scan's bound."""
    parsed: list[int] = []
    real_value = answer_scan._value

    def counted(after_key: bytearray) -> tuple[object, bool]:
        parsed.append(len(after_key))
        return real_value(after_key)

    monkeypatch.setattr(answer_scan, "_value", counted)
    assert _scanned(hostile, [size], random.Random(1)) == {}
    bound = answer_scan.PARSE_ALLOWANCE_BYTES + answer_scan.PARSE_BYTES_PER_BYTE * len(hostile)
    assert sum(parsed) <= bound + MAX_VALUE_BYTES  # the last value parsed may pass it
