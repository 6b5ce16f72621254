"""The failed-request memory both tiers blame poison requests with (``igw.scheduling.request_faults``)."""

from __future__ import annotations

from igw.scheduling.request_faults import REQUEST_MEMORY_CAPACITY, REQUEST_MEMORY_S, RequestFaultMemory


def test_a_body_failing_at_a_second_place_is_the_requests_fault_once() -> None:
    memory: RequestFaultMemory[str] = RequestFaultMemory()
    assert memory.record("a", 7, now=0.0) is None  # its first failure: the place's
    assert memory.record("a", 7, now=0.5) is None  # the same place again, none other tried: still the place's
    assert memory.failed_at(7, now=1.0) == {"a"}
    assert memory.record("b", 7, now=1.0) == frozenset({"a", "b"})  # the fault: a's count taken back
    assert memory.record("c", 7, now=2.0) == frozenset()  # taken already: nothing to take back
    assert memory.record("a", 7, now=2.0) == frozenset()
    assert memory.failed_at(7, now=2.0) == {"a", "b", "c"}
    assert memory.record("a", 8, now=2.0) is None  # another body is another request


def test_failed_requests_are_forgotten_after_a_minute_and_bounded() -> None:
    memory: RequestFaultMemory[str] = RequestFaultMemory()
    assert not memory.active(0.0)
    memory.record("a", 7, now=0.0)
    assert memory.active(REQUEST_MEMORY_S)
    assert memory.record("b", 7, now=REQUEST_MEMORY_S + 0.1) is None  # too late to blame the request
    assert memory.failed_at(7, now=REQUEST_MEMORY_S + 0.1) == {"b"}
    assert not memory.active(2 * REQUEST_MEMORY_S + 0.2)
    assert memory.entries == {}
    for digest in range(REQUEST_MEMORY_CAPACITY + 5):
        memory.record(f"p{digest % 50}", digest, now=1000.0)
    assert len(memory.entries) == REQUEST_MEMORY_CAPACITY
    assert memory.failed_at(0, now=1000.0) == frozenset()  # the oldest went first
    last = REQUEST_MEMORY_CAPACITY + 4
    assert memory.failed_at(last, now=1000.0) == {f"p{last % 50}"}
    assert memory.failed_at(last, now=1000.0 + REQUEST_MEMORY_S + 1) == frozenset()


def test_an_adopting_memory_shares_the_previous_entries() -> None:
    old: RequestFaultMemory[str] = RequestFaultMemory()
    old.record("a", 7, now=0.0)
    new: RequestFaultMemory[str] = RequestFaultMemory()
    new.adopt(old)
    assert new.record("b", 7, now=1.0) == frozenset({"a", "b"})
