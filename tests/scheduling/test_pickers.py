from __future__ import annotations

import collections

import pytest

from igw.scheduling.plugins.max_score_picker import MaxScorePicker
from igw.scheduling.plugins.weighted_random_picker import WeightedRandomPicker
from tests.compiled.tree import skip_compiled
from tests.scheduling.helpers import ctx


@pytest.mark.parametrize(
    ("totals", "k", "expected"),
    [
        pytest.param([0.1, 0.9, 0.5], 1, [1], id="max-wins"),
        pytest.param([0.1, 0.9, 0.5], 3, [1, 2, 0], id="ranked-fallbacks"),
        pytest.param([0.3], 3, [0], id="single"),
        pytest.param([float("nan"), 0.2, 0.7], 1, [2], id="leading-nan-loses"),
        pytest.param([0.2, float("nan"), 0.7], 1, [2], id="inner-nan-loses"),
        pytest.param([float("nan")], 1, [0], id="single-nan"),
    ],
)
def test_max_score_ranking(totals: list[float], k: int, expected: list[int]) -> None:
    assert MaxScorePicker(max_endpoints=k).rank(ctx(), totals) == expected


@pytest.mark.parametrize("total", [0.0, 0.7, 1e300, float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize("k", [1, 3])
def test_one_candidate_is_picked_without_a_draw(total: float, k: int) -> None:
    """The pick of a one-endpoint pool, whatever its total, leaves the random stream untouched (the
    general steps draw only to break ties, and one candidate has none)."""
    c = ctx(seed=5)
    before = c.rng.getstate()
    assert MaxScorePicker(max_endpoints=k).rank(c, [total]) == [0]
    assert c.rng.getstate() == before


@pytest.mark.parametrize("k", [1, 3])
def test_max_score_ties_are_uniformly_random(k: int) -> None:
    picker = MaxScorePicker(max_endpoints=k)
    c = ctx(seed=3)
    counts = collections.Counter(picker.rank(c, [1.0, 1.0, 1.0, 0.2])[0] for _ in range(3000))
    assert set(counts) == {0, 1, 2}
    assert all(900 < counts[i] < 1100 for i in range(3))


def test_max_score_all_nan_totals_still_pick_one_at_random() -> None:
    picker = MaxScorePicker(max_endpoints=1)
    c = ctx(seed=7)
    nan = float("nan")
    counts = collections.Counter(picker.rank(c, [nan, nan, nan])[0] for _ in range(900))
    assert set(counts) == {0, 1, 2}


def test_weighted_random_is_proportional_to_score() -> None:
    picker = WeightedRandomPicker(max_endpoints=1)
    c = ctx(seed=11)
    counts = collections.Counter(picker.rank(c, [1.0, 3.0, 0.0])[0] for _ in range(4000))
    assert counts[2] == 0
    assert 0.70 < counts[1] / 4000 < 0.80


def test_weighted_random_all_zero_is_uniform_and_returns_k() -> None:
    picker = WeightedRandomPicker(max_endpoints=2)
    c = ctx(seed=5)
    ranks = [picker.rank(c, [0.0, 0.0, 0.0]) for _ in range(900)]
    assert all(len(r) == 2 and len(set(r)) == 2 for r in ranks)
    counts = collections.Counter(r[0] for r in ranks)
    assert all(240 < counts[i] < 360 for i in range(3))


@skip_compiled(
    "igw.scheduling.plugins.max_score_picker",
    "the test switches the module's NATIVE_TOP to rank both ways, a flag compiled code bound at build time",
)
def test_the_native_kth_selection_keeps_what_nlargest_and_compress_keep() -> None:
    """``_reaching_kth`` (the compiled build's way, run interpreted here) keeps exactly the positions
    whose total reaches ``heapq.nlargest(k, totals)[-1]``, ties, repeats, infinities and signed
    zeros included; and the ranking it feeds equals the interpreted one, random stream included."""
    import heapq
    import random

    from igw.scheduling.plugins import max_score_picker
    from igw.scheduling.plugins.max_score_picker import NATIVE_TOP, PREFILTER_ABOVE, _reaching_kth

    assert not NATIVE_TOP  # this test process runs the sources
    rng = random.Random(9)
    pool = [0.0, -0.0, 1.0, 2.5, -1.0, float("inf"), float("-inf"), 1e-300]
    for _ in range(3_000):
        k = rng.randint(1, 5)
        n = rng.randint(k, 60)
        totals = [rng.choice(pool) if rng.random() < 0.5 else round(rng.random(), 1) for _ in range(n)]
        kth = heapq.nlargest(k, totals)[-1]
        assert _reaching_kth(totals, k) == [i for i, t in enumerate(totals) if t >= kth]
    for k in (1, 2, 3, 4):
        for _ in range(50):
            n = rng.randint(PREFILTER_ABOVE * k + 1, 400)
            totals = [rng.choice(pool) if rng.random() < 0.3 else round(rng.random(), 2) for _ in range(n)]
            answers = []
            for native in (False, True):
                max_score_picker.NATIVE_TOP = native
                try:
                    c = ctx(seed=n)
                    answers.append((MaxScorePicker(max_endpoints=k).rank(c, totals), c.rng.getstate()))
                finally:
                    max_score_picker.NATIVE_TOP = False
            assert answers[0] == answers[1]


def test_max_score_ranks_as_nlargest_of_all_candidates_on_every_path() -> None:
    """The ranking (and the random stream after it) equals ``heapq.nlargest`` over every candidate's
    ``(total, tie-break, index)``, on each of the picker's paths: a NaN among the totals, a pool of
    at most ``k``, a small pool cut at the k-th total, a large one prefiltered. The zip of all
    candidates is made only on the first two (session s19); this fails if a path ranks another
    list or draws differently."""
    import heapq
    import random

    rng = random.Random(19)
    pool = [0.0, -0.0, 1.0, 0.5, float("inf"), float("-inf"), float("nan")]
    paths = {"nan": 0, "at-most-k": 0, "small": 0, "large": 0}
    for _ in range(2_000):
        k = rng.randint(2, 5)
        n = rng.randint(2, 50)
        totals = [rng.choice(pool) if rng.random() < 0.15 else round(rng.random(), 1) for _ in range(n)]
        total = sum(totals)
        path = "nan" if total != total else "at-most-k" if n <= k else "small" if n <= 8 * k else "large"
        paths[path] += 1
        c = ctx(seed=n)
        got = MaxScorePicker(max_endpoints=k).rank(c, totals)
        r = ctx(seed=n).rng
        tiebreak = [r.random() for _ in range(n)]
        expected = [i for _, _, i in heapq.nlargest(k, zip(totals, tiebreak, range(n), strict=True))]
        assert got == expected, (totals, k)
        assert c.rng.getstate() == r.getstate()
    assert all(count > 20 for count in paths.values()), paths
