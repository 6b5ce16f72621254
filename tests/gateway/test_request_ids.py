"""Fresh request ids: drawn ahead in batches (one ``os.urandom`` read per batch), each 128 random
bits in a uuid4's hex shape, never repeated - not across a batch boundary, and not between a
process and a child forked from it (which inherits the batch its parent drew)."""

from __future__ import annotations

import os
import re

import pytest

from igw.gateway import inference
from igw.gateway.inference import fresh_request_id, request_id_for

HEX_ID = re.compile(r"[0-9a-f]{32}")


def test_fresh_ids_are_32_hex_digits_and_unique_across_several_draws() -> None:
    ids = [fresh_request_id() for _ in range(3 * inference._IDS_PER_DRAW + 7)]
    assert all(HEX_ID.fullmatch(i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_a_client_id_is_kept_and_a_missing_or_implausible_one_replaced() -> None:
    assert request_id_for({"x-request-id": "client-42"}) == "client-42"
    assert HEX_ID.fullmatch(request_id_for({}))
    assert HEX_ID.fullmatch(request_id_for({"x-request-id": "eyJ.a.b"}))  # a JWT, not an id


def test_one_urandom_read_serves_a_whole_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []
    real = os.urandom

    def counting(n: int) -> bytes:
        reads.append(n)
        return real(n)

    inference._FRESH_IDS.clear()
    monkeypatch.setattr(os, "urandom", counting)
    ids = [fresh_request_id() for _ in range(inference._IDS_PER_DRAW)]
    assert reads == [16 * inference._IDS_PER_DRAW]
    assert len(set(ids)) == len(ids)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_reuse_the_ids_its_parent_drew() -> None:
    fresh_request_id()  # the parent has a batch drawn, most of it unused
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, to the parent
        try:
            os.write(write_end, fresh_request_id().encode())
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        child_id = os.read(read_end, 64).decode()
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    parent_id = fresh_request_id()
    assert HEX_ID.fullmatch(child_id)
    assert child_id != parent_id
