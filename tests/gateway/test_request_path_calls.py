"""Calls the non-streamed request path no longer makes (issue 16, session s50): counted with
``sys.setprofile``, which reports each Python call and each call of a C function or method, so each
test fails when the cut work comes back; each result is compared with what the longer way gives."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

from igw.gateway import upstream
from igw.gateway.inference_apis import ANTHROPIC_APIS, InferenceApi
from igw.gateway.request_body import parse_body
from igw.gateway.tenant_fields import refused_header
from igw.gateway.upstream import upstream_header_block
from tests.call_counts import counted


def test_an_api_is_hashed_by_cs_slot_not_a_python_method() -> None:
    raw = b'{"model": "m", "prompt": "hello", "max_tokens": 4}'
    with counted() as calls:
        body = parse_body(raw, api=InferenceApi.COMPLETIONS, header_model=None)
        anthropic = InferenceApi.MESSAGES in ANTHROPIC_APIS
    assert calls["__hash__"] == 0  # Enum.__hash__ ran three times per body before
    assert body.model == "m"
    assert body.max_tokens == 4
    assert anthropic
    assert InferenceApi.CHAT not in ANTHROPIC_APIS
    # a member is its own key in every table keyed by the API, as before
    table = {api: api.value for api in InferenceApi}
    assert all(table[api] == api.value for api in InferenceApi)
    assert len(table) == len(list(InferenceApi))


def test_an_added_fields_name_is_encoded_once_not_per_request() -> None:
    fields = [(b"Host", b"gw"), (b"X-Request-Id", b"client"), (b"Accept", b"*/*")]
    add = {"X-Gateway-Model-Name": "m", "Accept-Encoding": "identity", "X-Request-Id": "gw-1"}
    first = upstream_header_block(fields, strip=frozenset(), add=add)
    with counted() as calls:
        again = upstream_header_block(fields, strip=frozenset(), add=add)
    assert (
        again
        == first
        == (b"X-Request-Id: gw-1\r\nAccept: */*\r\nX-Gateway-Model-Name: m\r\nAccept-Encoding: identity\r\n")
    )
    assert calls["c:encode"] == len(add)  # the values alone (six: each name twice more before)
    assert calls["c:lower"] == len(fields)  # the client's names (three more for the added ones before)


def test_the_added_names_kept_are_bounded_and_a_new_one_is_written_right() -> None:
    for i in range(upstream._ADDED_NAMES_HELD + 10):
        block = upstream_header_block([(b"x-n%d" % i, b"old")], strip=frozenset(), add={f"X-N{i}": "new"})
        assert block == f"X-N{i}: new\r\n".encode()
    assert len(upstream._ADDED_NAMES) <= upstream._ADDED_NAMES_HELD


def test_no_character_but_x_lowers_to_a_name_starting_with_x() -> None:
    # what refused_header's first-character test rests on: every refused name starts with "x-"
    others = [c for c in map(chr, range(sys.maxunicode + 1)) if c.lower().startswith("x") and c not in "xX"]
    assert others == []


def _longhand(names: list[str], allowed: frozenset[str]) -> str | None:
    """refused_header as it read every name before session s50."""
    for name in names:
        lower = name.lower()
        if lower == "x-data-parallel-rank":
            if allowed.isdisjoint(("routed_dp_rank", "data_parallel_rank")):
                return lower
        elif lower == "x-smg-routing-key":
            if "routing_key" not in allowed:
                return lower
        elif lower.startswith("x-override-") and lower[11:].replace("-", "_") not in allowed:
            return lower
    return None


@pytest.mark.parametrize(
    "names",
    [
        ["Host", "Content-Type", "Authorization", "Accept", "User-Agent"],
        ["Host", "X-Data-Parallel-Rank"],
        ["x-smg-routing-key", "Accept"],
        ["X-OVERRIDE-Rid", "Host"],
        ["X-Override-", ""],
        ["Xenon", "X-Kept", "x-override-bootstrap-host"],
    ],
)
@pytest.mark.parametrize("allowed", [frozenset(), frozenset({"rid", "routing_key", "data_parallel_rank"})])
def test_refused_header_answers_as_before(names: list[str], allowed: frozenset[str]) -> None:
    assert refused_header(names, allowed) == _longhand(names, allowed)


def test_refused_header_lowers_only_the_names_that_start_with_x() -> None:
    names = ["Host", "Content-Type", "Content-Length", "Authorization", "Accept", "X-Kept", "User-Agent"]
    with counted() as calls:
        assert refused_header(names, frozenset()) is None
    assert calls["c:lower"] == 1


def _longhand_stored(obj: object) -> str | None:
    response = upstream._response_object(obj)
    if response is not None and response.get("store") is False:
        return None
    return upstream._response_id(response)


DOCS: list[object] = [
    {"id": "cmpl-1", "object": "text_completion", "choices": []},
    {"id": "resp_1", "object": "response"},
    {"id": "resp_2", "object": "response", "store": False},
    {"type": "response.completed", "response": {"id": "resp_3", "object": "response"}},
    {"response": None},
    {"response": {"id": "x"}},
    {"object": "response"},
    {"object": "response", "id": ""},
    [],
    None,
    "response",
]


@pytest.mark.parametrize("doc", DOCS)
def test_the_stored_response_id_is_what_the_longhand_reads(doc: object) -> None:
    assert upstream._stored_response_id(doc) == _longhand_stored(doc)


def test_a_completions_answer_is_told_from_a_stored_response_without_python_calls() -> None:
    stored: Callable[[object], str | None] = upstream._stored_response_id
    doc = DOCS[0]
    with counted() as calls:
        assert stored(doc) is None
    harness = ("__exit__", "counted")
    python_calls = {n: k for n, k in calls.items() if not n.startswith("c:") and n not in harness}
    assert python_calls == {"_stored_response_id": 1}
