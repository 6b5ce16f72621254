"""The tracing cost benchmark of ``igw perf gateway`` measures what it names: the off variants
record no span, the sampled one a full span tree per request, the unsampled one none."""

from __future__ import annotations

from igw.perf.tracing_micro import observer_costs


def test_each_variant_records_the_spans_it_claims() -> None:
    costs = observer_costs(requests=20, rounds=2)
    assert [c.name for c in costs] == [
        "telemetry calls before tracing (baseline)",
        "tracing off (default)",
        "tracing on, every request sampled",
        "tracing on, none sampled",
    ]
    assert [c.spans_per_request for c in costs] == [0, 0, 6, 0]
    assert all(c.mean_us > 0 for c in costs)
