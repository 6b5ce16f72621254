"""Which refused attempts a request is tried again for (``spec.extensions.routing.retry``), and the
budget that bounds those retries.

A request may go to the picker's next-best endpoint only while its client has been sent nothing: the
request path checks that (no response started) and asks :func:`retry_condition` what the refusal
was. The model server's own answers are classified by status, with nothing generated (a 5xx after
tokens is a broken stream, never retried); of the answers the gateway made itself, only a
connection that failed before its answer was complete counts (the ``5xx`` condition, as Envoy's
``5xx`` includes resets), never one the gateway stopped waiting for (a response or idle timeout:
the model server had the request for that long).

Why a budget: a fleet failing every request (a bad rollout, a dependency down) would otherwise be
sent every request twice, which doubles its load exactly when it can least take it. As in Envoy's
retry budget, retries of answered requests in flight at once are at most ``budgetPercent`` of the
requests in flight, or ``minRetryConcurrency`` whatever the load. A connect failure is not budgeted:
no model server saw the request, so its retry adds no work to any.

The budget is a pool's (a scheduler's), as Envoy's is a cluster's: a pool's retries in flight are
bounded by the requests in flight at that pool's pods. The load a budget protects is one fleet's,
and a fleet's retries are caused by its own pods' refusals; until session s50 one budget bounded the
whole process, and a pool refusing everything (a canary version's bad rollout, one model's pods all
down) spent it on its own retries, so a healthy pool's transient refusal (one pod's 503) reached its
client unretried. The cost: at low load every pool may have its ``minRetryConcurrency`` in flight
at once - each fleet still sees no more than its own budget.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from mypy_extensions import mypyc_attr
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from igw.gateway.upstream import ExchangeResult
from igw.scheduling.retry_policy import RetryCondition, RetryPolicy, refusal_condition


def refused_status(result: ExchangeResult | None) -> int | None:
    """The status of the model server's own error answer (4xx, 5xx) with nothing generated - a
    refusal at its HTTP layer - else ``None`` (a gateway-made answer sets ``error``). A 404 for an
    adapter request: the pod does not serve that adapter; for the pool's own model: it serves
    another name. Read per request by the frozen-page bookkeeping and the 404 checks, and by
    :func:`retry_condition`."""
    if result is None or result.status < 400 or result.error is not None or result.events:
        return None
    return result.status


def request_digest(result: ExchangeResult | None, body: bytes) -> int | None:
    """The digest of ``body`` (the request as routed) that an outcome ``result`` carries to failure
    detection, else ``None``: the same request failing at another place too is the request's fault
    (:mod:`igw.scheduling.request_faults`; a pod's outlier detection, a cluster's at tier 2). Only
    for the server's own 500 answer: the server answered, so it lives, and the request's next try
    may go elsewhere. A stream it broke may be a request that killed the engine, which must not be
    steered to a second one; an unavailable server's 502/503/504 is never the request's."""
    return hash(body) if body and refused_status(result) == 500 else None


def retry_condition(result: ExchangeResult) -> RetryCondition | None:
    """The condition (of ``retryOn``'s) an attempt's refusal meets, or ``None`` for an answer that is
    not a refusal - one that generated tokens, a success, a client error other than 404 and 429, or
    a request the gateway stopped waiting for. The caller checks that nothing reached the client."""
    status = refused_status(result)
    if status is not None:
        return refusal_condition(status)
    # Made by the gateway before anything was generated: a connection that failed before its answer
    # was complete (Envoy's ``5xx`` includes resets), not a wait the gateway gave up.
    if result.error is not None and not result.events and result.status == 502 and not result.gave_up:
        return RetryCondition.ANY_5XX
    return None


class RetryBudget:
    """The retries of answered requests one gateway process has in flight, per pool (the module
    docstring)."""

    __slots__ = ("_active",)

    def __init__(self) -> None:
        self._active: dict[str, int] = {}
        """Per pool: retries taken and not yet given back (each covers one attempt after a refusal);
        a pool with none has no entry, so pools a reload removed leave nothing behind."""

    @property
    def active(self) -> int:
        """Retries in flight, every pool's together."""
        return sum(self._active.values())

    def pools(self) -> frozenset[str]:
        """The pools with retries in flight."""
        return frozenset(self._active)

    def active_in(self, pool: str) -> int:
        """Retries in flight charged to ``pool``."""
        return self._active.get(pool, 0)

    def take(self, policy: RetryPolicy, pool: str, *, requests_in_flight: int) -> bool:
        """Count one retry in for ``pool`` (the pool whose pod refused) if ``policy``'s budget allows
        it (the policy in force: a reload may change it while retries are in flight), with
        ``requests_in_flight`` requests in flight at that pool (the retrying one included); False,
        nothing counted, when it does not."""
        allowed = budget_allows(policy, requests_in_flight)
        active = self._active.get(pool, 0)
        if active >= allowed:
            return False
        self._active[pool] = active + 1
        return True

    def give_back(self, pool: str) -> None:
        """The retried attempt ``pool``'s budget counted ended (whatever its outcome)."""
        left = self._active[pool] - 1
        if left:
            self._active[pool] = left
        else:
            del self._active[pool]


def budget_allows(policy: RetryPolicy, requests_in_flight: int) -> int:
    """Retries in flight a pool's budget allows with ``requests_in_flight`` requests in flight at
    its pods: ``budgetPercent`` of them, ``minRetryConcurrency`` at least."""
    return max(policy.min_retry_concurrency, requests_in_flight * policy.budget_percent // 100)


@mypyc_attr(native_class=False)  # mypyc: it subclasses prometheus_client's, so it stays a Python class
class RetryBudgetCollector(Collector):
    """``igw_upstream_retries_in_flight{scheduler}`` and ``igw_upstream_retry_budget{scheduler}``,
    read at each scrape: a pool's retries in flight beside what its budget allows at its current
    load, so an operator sees how close a pool is to refusing retries (``igw_upstream_retry_overflow``
    counts them only once it has). Why: since session s50 the budget is per pool (the module
    docstring), and the counters said what a budget refused, never how much of it was spent.

    ``pools``: each configured pool (scheduler) by name with the requests in flight at its pods;
    ``policy``: the retry policy in force. The label values are the configured pools' names (as the
    retry counters'), plus a pool a reload removed while it had retries in flight, until they end."""

    def __init__(
        self,
        budget: RetryBudget,
        pools: Callable[[], Mapping[str, int]],
        policy: Callable[[], RetryPolicy],
    ) -> None:
        self._budget = budget
        self._pools = pools
        self._policy = policy

    def collect(self) -> Iterator[Metric]:
        in_flight = dict(self._pools())
        policy = self._policy()
        active = GaugeMetricFamily(
            "igw_upstream_retries_in_flight",
            "Retries of answered requests in flight charged to the pool whose pod refused "
            "(spec.extensions.routing.retry's budget is per pool).",
            labels=["scheduler"],
        )
        allowed = GaugeMetricFamily(
            "igw_upstream_retry_budget",
            "Retries in flight the pool's retry budget allows at its current load: budgetPercent of "
            "the requests in flight at its pods, minRetryConcurrency at least.",
            labels=["scheduler"],
        )
        for pool in sorted({*in_flight, *self._budget.pools()}):
            active.add_metric([pool], self._budget.active_in(pool))
            allowed.add_metric([pool], budget_allows(policy, in_flight.get(pool, 0)))
        yield active
        yield allowed
