"""The alert-rule tests' PromQL evaluator (:mod:`tests.observability.promql_values`) against
Prometheus's documented semantics, each case naming its section of
https://prometheus.io/docs/prometheus/latest/querying/operators/ (``#anchor``). The method/code data
are the page's own example series."""

from __future__ import annotations

import math

import pytest

from tests.observability.promql_values import Given, QueryError, fired, reach, values

ERRORS = "method_code:http_errors:rate5m"
REQUESTS = "method:http_requests:rate5m"

EXAMPLE: Given = [
    ({"__name__": ERRORS, "method": "get", "code": "500"}, 24.0),
    ({"__name__": ERRORS, "method": "get", "code": "404"}, 30.0),
    ({"__name__": ERRORS, "method": "put", "code": "501"}, 3.0),
    ({"__name__": ERRORS, "method": "post", "code": "500"}, 6.0),
    ({"__name__": ERRORS, "method": "post", "code": "404"}, 21.0),
    ({"__name__": REQUESTS, "method": "get"}, 600.0),
    ({"__name__": REQUESTS, "method": "del"}, 34.0),
    ({"__name__": REQUESTS, "method": "post"}, 120.0),
]


def _s(name: str, value: float, **labels: str) -> tuple[dict[str, str], float]:
    return ({"__name__": name, **labels}, value)


def test_one_to_one_matching_keeps_the_left_labels_less_the_ignored() -> None:
    """#one-to-one-vector-matches: the page's example and its result."""
    got = fired(f'{ERRORS}{{code="500"}} / ignoring(code) {REQUESTS}', EXAMPLE)
    assert got == {(("method", "get"),): 24 / 600, (("method", "post"),): 6 / 120}


def test_group_left_keeps_the_many_sides_labels() -> None:
    """#many-to-one-and-one-to-many-vector-matches: the page's ``group_left`` example."""
    got = fired(f"{ERRORS} / ignoring(code) group_left {REQUESTS}", EXAMPLE)
    assert got == {
        (("code", "500"), ("method", "get")): 24 / 600,
        (("code", "404"), ("method", "get")): 30 / 600,
        (("code", "500"), ("method", "post")): 6 / 120,
        (("code", "404"), ("method", "post")): 21 / 120,
    }


def test_group_right_keeps_the_right_sides_labels_and_the_left_operand_first() -> None:
    """#many-to-one-and-one-to-many-vector-matches: with ``group_right`` the right side is the "many"
    side, so the result is labelled as its elements (the group labels copied from the left side),
    while the operator still takes the left side's value first. The canary alert's "the rule's other
    targets" (``sum by (rule) - on(rule) group_right sum by (rule, target)``) relies on it: the
    evaluator the global-rule tests used until this change labelled such a result as the left side
    (``{rule}``), so a comparison with a ``{rule, target}`` vector matched nothing."""
    given: Given = [
        _s("x", 3.0, rule="chat", target="a"),
        _s("x", 1.0, rule="chat", target="b"),
        _s("info", 1.0, rule="chat", owner="team-1"),
    ]
    expr = "sum by (rule) (x) - on(rule) group_right sum by (rule, target) (x)"
    assert fired(expr, given) == {
        (("rule", "chat"), ("target", "a")): 1.0,
        (("rule", "chat"), ("target", "b")): 3.0,
    }
    with_owner = "info * on(rule) group_right(owner) x"
    assert fired(with_owner, given) == {
        (("owner", "team-1"), ("rule", "chat"), ("target", "a")): 3.0,
        (("owner", "team-1"), ("rule", "chat"), ("target", "b")): 1.0,
    }


def test_many_to_many_without_a_group_modifier_is_an_error_not_a_pick() -> None:
    """#vector-matching / #one-to-one-vector-matches: one-to-one needs a unique pair. The page's
    ``group_left`` example without ``group_left`` (several left entries per method) fails, as does a
    right side with a repeated match group, whatever the left side holds; so does a "one" side of a
    grouped match with a repeated group, and a grouped match whose results are not unique."""
    with pytest.raises(QueryError, match="many-to-one matching must be explicit"):
        values(f"{ERRORS} / ignoring(code) {REQUESTS}", EXAMPLE)
    with pytest.raises(QueryError, match=r"on the right hand-side.*many-to-many matching not allowed"):
        values(f"{REQUESTS} / ignoring(code) {ERRORS}", EXAMPLE)
    with pytest.raises(QueryError, match="on the right hand-side"):
        values(f"{ERRORS} / ignoring(code) group_left {ERRORS}", EXAMPLE)
    with pytest.raises(QueryError, match="on the left hand-side"):
        values(f"{ERRORS} / ignoring(code) group_right {ERRORS}", EXAMPLE)
    tagged: Given = [
        _s("m", 1.0, method="get", code="500", x="1"),
        _s("m", 2.0, method="get", code="500", x="2"),
        _s("one", 4.0, method="get", x="9"),
    ]
    with pytest.raises(QueryError, match="grouping labels must ensure unique matches"):
        values("m / on(method) group_left(x) one", tagged)


def test_a_left_duplicate_filtered_out_before_matching_is_no_error() -> None:
    """#comparison-binary-operators: a comparison filters first; Prometheus counts a left-side match
    group as used only for an element it keeps, so two left elements of one group pass while at most
    one survives the comparison (``get``: 24 and 30 against 600 / 21)."""
    expr = f'{ERRORS}{{method="get"}} > ignoring(code) {REQUESTS} / 21'
    assert fired(expr, EXAMPLE) == {(("method", "get"),): 30.0}  # one-to-one: ``code`` ignored, so dropped
    with pytest.raises(QueryError, match="many-to-one matching must be explicit"):
        values(f"{ERRORS} > ignoring(code) {REQUESTS} / 1000", EXAMPLE)


def test_the_bool_modifier_gives_zero_or_one_and_drops_the_name() -> None:
    """#comparison-binary-operators: with ``bool`` nothing is filtered, each element is 0 or 1 and
    the metric name goes; between two scalars ``bool`` gives a number."""
    given: Given = [_s("up", 1.0, instance="a"), _s("up", 0.0, instance="b"), _s("want", 1.0, instance="a")]
    assert values("up == bool 1", given) == {
        frozenset({("instance", "a")}): 1.0,
        frozenset({("instance", "b")}): 0.0,
    }
    assert values("up == 1", given) == {frozenset({("__name__", "up"), ("instance", "a")}): 1.0}
    assert values("up != bool want", given) == {frozenset({("instance", "a")}): 0.0}
    assert values("2 > bool 1", given) == 1.0
    assert values("1 >= bool 2", given) == 0.0


def test_nan_passes_no_comparison_but_not_equal() -> None:
    """#arithmetic-binary-operators and #comparison-binary-operators: values are IEEE floats, so
    ``0 / 0`` is NaN, which compares false with everything (itself too) - a filter drops it - and
    ``!=`` true."""
    given: Given = [
        _s("err", 0.0, job="a"),
        _s("all", 0.0, job="a"),
        _s("err", 1.0, job="b"),
        _s("all", 0.0, job="b"),
    ]
    ratio = values("err / all", given)
    assert isinstance(ratio, dict)
    assert math.isnan(ratio[frozenset({("job", "a")})])
    assert ratio[frozenset({("job", "b")})] == math.inf
    assert fired("err / all > 0.05", given) == {(("job", "b"),): math.inf}
    assert fired("err / all <= 0.05", given) == {}
    assert fired("err / all == err / all", given) == {(("job", "b"),): math.inf}
    not_equal = fired("err / all != 0", given)
    assert list(not_equal) == [(("job", "a"),), (("job", "b"),)]
    assert fired("err / all > bool 0", given) == {(("job", "a"),): 0.0, (("job", "b"),): 1.0}


def test_min_and_max_skip_nan_unless_every_value_is_nan() -> None:
    """#aggregation-operators: ``min``/``max`` select over the numbers of a group; Prometheus lets a
    NaN give way to any number, in whatever order the series come."""
    for order in (1, -1):
        given: Given = [
            _s("r", math.nan, g="x", i="1"),
            _s("r", 2.0, g="x", i="2"),
            _s("r", 5.0, g="x", i="3"),
            _s("r", math.nan, g="y", i="1"),
        ][::order]
        assert fired("max by (g) (r)", given)[(("g", "x"),)] == 5.0
        assert fired("min by (g) (r)", given)[(("g", "x"),)] == 2.0
        assert math.isnan(fired("max by (g) (r)", given)[(("g", "y"),)])


def test_arithmetic_and_aggregation_drop_labels_as_documented() -> None:
    """#arithmetic-binary-operators: arithmetic drops the metric name (a comparison keeps it);
    #aggregation-operators: ``by`` keeps only its labels, ``without`` every other label but the
    name; a range function's result has no name either."""
    given: Given = [
        _s("req", 2.0, job="api", instance="i1", code="200"),
        _s("req", 3.0, job="api", instance="i2", code="200"),
        _s("req", 4.0, job="api", instance="i2", code="500"),
    ]
    assert values("req * 2", given) == {
        frozenset({("job", "api"), ("instance", "i1"), ("code", "200")}): 4.0,
        frozenset({("job", "api"), ("instance", "i2"), ("code", "200")}): 6.0,
        frozenset({("job", "api"), ("instance", "i2"), ("code", "500")}): 8.0,
    }
    assert fired("req > 1", given) == fired("req", given)  # a filter: every element kept
    assert values("req > 3", given) == {
        frozenset({("__name__", "req"), ("job", "api"), ("instance", "i2"), ("code", "500")}): 4.0
    }
    assert values("sum by (code) (req)", given) == {
        frozenset({("code", "200")}): 5.0,
        frozenset({("code", "500")}): 4.0,
    }
    assert values("sum without (instance) (req)", given) == {
        frozenset({("job", "api"), ("code", "200")}): 5.0,
        frozenset({("job", "api"), ("code", "500")}): 4.0,
    }
    assert values("count(req)", given) == {frozenset(): 3.0}
    assert values("rate(req[5m])", given) == values("req * 1", given)


def test_set_operators_match_many_to_many_and_keep_the_left_side() -> None:
    """#logicalset-binary-operators: ``and`` keeps the left elements (name and value) with a match on
    the right, ``unless`` those without, ``or`` adds the right elements whose labels the left lacks."""
    given: Given = [
        _s("a", 1.0, instance="i1"),
        _s("a", 2.0, instance="i2"),
        _s("b", 7.0, instance="i2", x="1"),
        _s("b", 8.0, instance="i2", x="2"),
        _s("b", 9.0, instance="i3", x="3"),
    ]
    assert fired("a and on(instance) b", given) == {(("instance", "i2"),): 2.0}
    assert fired("a unless on(instance) b", given) == {(("instance", "i1"),): 1.0}
    assert fired("a or on(instance) b", given) == {
        (("instance", "i1"),): 1.0,
        (("instance", "i2"),): 2.0,
        (("instance", "i3"), ("x", "3")): 9.0,
    }


def test_reach_crosses_every_threshold_but_those_under_unless() -> None:
    """:func:`reach`: the most an expression can fire for, each element with the series it came from;
    a comparison under ``unless``'s right side keeps nothing (the fewest it can suppress)."""
    series = [
        {"__name__": "fail", "instance": "a"},
        {"__name__": "ok", "instance": "a"},
        {"__name__": "fail", "instance": "b"},
    ]
    assert reach("sum by (instance) (fail) > 0 unless sum by (instance) (ok) > 0", series) == {
        (("instance", "a"),): frozenset({0}),
        (("instance", "b"),): frozenset({2}),
    }
    assert reach("sum(fail) == 0 and on() sum(ok) > 1", series) == {(): frozenset({0, 1, 2})}
