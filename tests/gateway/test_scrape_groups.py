"""Scrapes fire in groups of up to SCRAPE_GROUP endpoints whose phases split the interval."""

from __future__ import annotations

import math

import pytest

from igw.gateway.scrape_pacing import SCRAPE_GROUP, next_scrape_delay

INTERVAL = 0.05


@pytest.mark.parametrize("endpoints", [1, SCRAPE_GROUP, SCRAPE_GROUP + 1, 100, 1000])
def test_each_endpoint_is_due_once_per_interval_in_its_groups_phase(endpoints: int) -> None:
    groups = math.ceil(endpoints / SCRAPE_GROUP)
    now = 1234.5678
    dues = {slot: now + next_scrape_delay(now, INTERVAL, slot, endpoints) for slot in range(endpoints)}
    assert all(now < due <= now + INTERVAL + 1e-9 for due in dues.values())
    phases = {round(due % INTERVAL, 9) for due in dues.values()}
    assert len(phases) == groups  # one phase per group, spread over the interval
    sizes = [sum(1 for slot in dues if slot % groups == g) for g in range(groups)]
    assert max(sizes) <= SCRAPE_GROUP
    for slot, due in dues.items():  # the next one after a scrape at ``due`` is one interval later
        assert next_scrape_delay(due + 1e-6, INTERVAL, slot, endpoints) == pytest.approx(INTERVAL - 1e-6)


def test_a_late_scrape_waits_for_its_groups_next_turn_not_a_full_interval() -> None:
    # due at 0.0; the scrape finished 30 ms late: the next turn is 20 ms away, not 50 ms
    assert next_scrape_delay(0.03, INTERVAL, 0, 1) == pytest.approx(0.02)
