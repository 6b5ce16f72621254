"""``EndpointEwma``: per-endpoint exponentially weighted mean, variance and standard error."""

from __future__ import annotations

import math

import pytest

from igw.scheduling.ewma import EndpointEwma


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
