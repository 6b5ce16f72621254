"""``EndpointEwma``: per-endpoint exponentially weighted mean, variance and standard error."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from igw.scheduling import ewma as ewma_module
from igw.scheduling.ewma import EndpointEwma
from tests.compiled.tree import skip_compiled


def test_mean_and_variance_follow_the_samples() -> None:
    ewma = EndpointEwma(alpha=0.5)
    ewma.observe("a", 1.0)
    assert ewma.get("a") == 1.0
    assert ewma.variances["a"] == 0.0
    ewma.observe("a", 3.0)
    assert ewma.get("a") == 2.0
    assert ewma.variances["a"] == pytest.approx(0.5 * (0.0 + 0.5 * 4.0))


def test_standard_error_shrinks_with_samples_but_not_below_the_window_error() -> None:
    ewma = EndpointEwma(alpha=0.2)
    assert ewma.standard_error("a") is None
    ewma.observe("a", 1.0)
    assert ewma.standard_error("a") == math.inf
    samples = [1.0, 3.0] * 50
    for s in samples:
        ewma.observe("a", s)
    se = ewma.standard_error("a")
    assert se is not None
    sd = math.sqrt(ewma.variances["a"])
    assert se == pytest.approx(sd * math.sqrt(0.2 / 1.8))


def test_constant_samples_have_no_noise() -> None:
    ewma = EndpointEwma(alpha=0.2)
    for _ in range(20):
        ewma.observe("a", 0.03)
    assert ewma.standard_error("a") == 0.0


def test_settled_count_is_the_window() -> None:
    assert EndpointEwma(alpha=0.2).settled_count == 9
    assert EndpointEwma(alpha=1.0).settled_count == 2


def test_forget_drops_everything() -> None:
    ewma = EndpointEwma(alpha=0.2)
    ewma.observe("a", 1.0)
    ewma.observe("a", 2.0)
    ewma.forget(["a"])
    assert ewma.get("a") is None
    assert ewma.count("a") == 0
    assert ewma.standard_error("a") is None


def _reference_observe(ewma: EndpointEwma, key: str, sample: float) -> None:
    """``observe`` as it was before it was written out: through ``set_state`` (which computes the
    standard error with ``_standard_error``)."""
    old = ewma.values.get(key)
    if old is None:
        ewma.set_state(key, mean=sample, variance=0.0, count=1)
        return
    a = ewma.alpha
    diff = sample - old
    ewma.set_state(
        key,
        mean=old + a * diff,
        variance=(1.0 - a) * (ewma.variances.get(key, 0.0) + a * diff * diff),
        count=ewma.counts.get(key, 1) + 1,
    )


@settings(max_examples=300, deadline=None)
@given(
    alpha=st.sampled_from([0.0, 0.1, 0.2, 0.5, 1.0]),  # the factories allow 0 to 1
    steps=st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),
            st.one_of(
                st.floats(min_value=-1e3, max_value=1e3),
                st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-300, 1e300]),
            ),
        ),
        max_size=30,
    ),
)
def test_observe_keeps_the_state_set_state_gives(alpha: float, steps: list[tuple[str, float]]) -> None:
    """Means, variances, counts and standard errors (NaN and infinities included, the ``max`` of
    the two error estimates as ``max`` picks it) equal those of the helper-based update."""
    fast, reference = EndpointEwma(alpha=alpha, track_changes=True), EndpointEwma(alpha=alpha)
    for key, sample in steps:
        fast.observe(key, sample)
        _reference_observe(reference, key, sample)
        for table in ("values", "variances", "counts", "errors"):
            got, want = getattr(fast, table), getattr(reference, table)
            assert {k: repr(v) for k, v in got.items()} == {k: repr(v) for k, v in want.items()}, table
        assert fast.changed is not None
        assert key in fast.changed


@skip_compiled("igw.scheduling.ewma", "counts calls through the module's globals, which native code binds")
def test_a_sample_works_out_no_alpha_constant_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """``sqrt(alpha / (2 - alpha))`` and the settled count depend on ``alpha`` alone: worked out when
    it is set, not per sample or per read (every outcome observes three or four EWMAs, and the TTFT
    pool reads the settled count per outcome); the errors are the formula's floats all the same,
    and setting ``alpha`` anew moves both."""
    roots: list[float] = []
    ceilings: list[float] = []
    ceil = math.ceil

    def counted_sqrt(x: float) -> float:
        roots.append(x)
        return math.sqrt(x)

    def counted_ceil(x: float) -> int:
        ceilings.append(x)
        return ceil(x)

    ewma = EndpointEwma(alpha=0.2)
    monkeypatch.setattr(ewma_module, "sqrt", counted_sqrt)
    monkeypatch.setattr(math, "ceil", counted_ceil)
    for sample in (1.0, 2.0, 4.0):
        ewma.observe("a", sample)
    assert ewma.settled_count == 9
    assert len(roots) == 4  # two per sample after the first: the spread and the count's root
    assert ceilings == []
    variance, count = ewma.variances["a"], ewma.counts["a"]
    sd = math.sqrt(variance)
    assert ewma.standard_error("a") == max(sd * math.sqrt(0.2 / 1.8), sd / math.sqrt(count))
    monkeypatch.undo()
    ewma.alpha = 0.5
    assert ewma.settled_count == 3
    ewma.observe("a", 8.0)
    variance, count = ewma.variances["a"], ewma.counts["a"]
    sd = math.sqrt(variance)
    assert ewma.standard_error("a") == max(sd * math.sqrt(0.5 / 1.5), sd / math.sqrt(count))
