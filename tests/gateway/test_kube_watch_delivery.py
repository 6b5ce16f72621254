"""How a Kubernetes watch hands its objects to the event loop (``_WatchThread``): the first change
after a quiet spell at once, a burst of events coalesced into few deliveries of the latest objects,
and a slow handler spacing them further (at most ``DELIVERY_SHARE`` of the loop's time); and the
pods handler evaluating only the pod objects it has not seen."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from kubernetes.client import V1ObjectMeta, V1Pod, V1PodCondition, V1PodStatus

from igw.config.model import LabelSelector, SchedulerSpec
from igw.gateway.discovery import kube
from igw.gateway.discovery.kube import DELIVERY_SHARE, _WatchThread, pod_endpoint
from igw.gateway.endpoints import DiscoveredEndpoint
from tests.gateway.support import wait_for


class Deliveries:
    """What the handler was given, and the loop time of each delivery."""

    def __init__(self, loop: asyncio.AbstractEventLoop, busy_s: float = 0.0) -> None:
        self.loop = loop
        self.busy_s = busy_s
        self.objects: list[dict[str, Any]] = []
        self.at: list[float] = []

    def __call__(self, objects: dict[str, Any]) -> None:
        self.objects.append(objects)
        self.at.append(self.loop.time())
        if self.busy_s:
            time.sleep(self.busy_s)  # a handler rebuilding a large pool holds the loop this long


def _watch(loop: asyncio.AbstractEventLoop, handler: Deliveries, min_interval_s: float) -> _WatchThread:
    """The delivery side of a watch thread (its own thread is not started: the test publishes)."""
    return _WatchThread(
        name="pods/test", list_fn=lambda **_: None, kwargs={}, on_objects=handler, loop=loop,
        min_interval_s=min_interval_s,
    )  # fmt: skip


def _burst(watch: _WatchThread, events: int) -> None:
    """``events`` watch events in a row from another thread, as the watch stream delivers them."""

    def run() -> None:
        objects: dict[str, Any] = {}
        for i in range(events):
            objects[f"ns/pod-{i}"] = i
            watch._publish(objects)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


async def test_a_burst_is_delivered_as_its_latest_objects_and_a_quiet_change_at_once() -> None:
    loop = asyncio.get_running_loop()
    handler = Deliveries(loop)
    watch = _watch(loop, handler, min_interval_s=0.5)
    started = loop.time()
    _burst(watch, 1)  # the first event after a quiet spell
    await wait_for(lambda: len(handler.objects) == 1, what="the first delivery")
    assert handler.at[0] - started < 0.5  # at once, not after the interval
    _burst(watch, 200)  # the rest of the burst, while the interval runs
    latest = {f"ns/pod-{i}": i for i in range(200)}
    await wait_for(lambda: handler.objects[-1:] == [latest], within=10, what="the burst's latest objects")
    await asyncio.sleep(0.7)  # nothing else was due
    assert len(handler.objects) == 2  # 201 events: the first at once, the latest when the interval was up
    assert handler.at[1] - handler.at[0] >= 0.5
    # A single change after a quiet spell: at once again.
    published = loop.time()
    watch._publish({"ns/pod-x": 1})
    await wait_for(lambda: len(handler.objects) == 3, what="the quiet change")
    assert handler.objects[-1] == {"ns/pod-x": 1}
    assert handler.at[-1] - published < 0.5


async def test_a_slow_handler_spaces_the_deliveries_of_a_burst_further() -> None:
    loop = asyncio.get_running_loop()
    handler = Deliveries(loop, busy_s=0.05)
    watch = _watch(loop, handler, min_interval_s=0.0)
    for _ in range(3):  # three bursts, each while the previous delivery's spacing runs
        _burst(watch, 20)
        await asyncio.sleep(0.01)
    await wait_for(lambda: len(handler.objects) >= 2, within=10, what="two deliveries")
    # After a 50 ms delivery the next waits at least 50 ms * (1 / share - 1): 200 ms at a share of 0.2.
    assert handler.at[1] - handler.at[0] >= 0.05 * (1 / DELIVERY_SHARE - 1) + 0.05 - 0.01


def _pod(name: str, ip: str, *, ready: bool = True, app: str = "llama") -> V1Pod:
    return V1Pod(
        metadata=V1ObjectMeta(name=name, namespace="inference", labels={"app": app}),
        status=V1PodStatus(
            phase="Running", pod_ip=ip, conditions=[V1PodCondition(type="Ready", status=str(ready))]
        ),
    )


class _Sink:
    def __init__(self) -> None:
        self.reports: list[list[str]] = []

    def apply_endpoints(self, scheduler: str, endpoints: Sequence[DiscoveredEndpoint]) -> None:
        self.reports.append([e.key for e in endpoints])

    def apply_bbr_adapters(self, adapters: Mapping[str, str]) -> None:
        raise AssertionError("not a pod report")

    def apply_services(self, services: Mapping[str, Sequence[str]]) -> None:
        raise AssertionError("not a pod report")


def test_the_pods_handler_evaluates_only_pod_objects_it_has_not_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every delivery carries the whole pool; a pod object the watch kept (no event for it) was
    evaluated at an earlier delivery and is not again. A replaced object (a status change) is."""
    evaluated: list[str] = []

    def counting(pod: Any, *, target_port: int) -> DiscoveredEndpoint | None:
        evaluated.append(str(pod.metadata.name))
        return pod_endpoint(pod, target_port=target_port)

    monkeypatch.setattr(kube, "pod_endpoint", counting)
    spec = SchedulerSpec(
        name="s", model_selector=LabelSelector(match_labels={"app": "llama"}), model_name="m"
    )
    sink = _Sink()
    apply = kube.KubeDiscovery._pods_handler(sink, spec)
    pods = {f"inference/p{i}": _pod(f"p{i}", f"10.0.0.{i}") for i in range(3)}
    apply(dict(pods))
    apply(dict(pods))
    assert evaluated == ["p0", "p1", "p2"]
    pods["inference/p1"] = _pod("p1", "10.0.0.1", ready=False)  # its event: a new object
    pods["inference/p3"] = _pod("p3", "10.0.0.3", app="other")  # not this scheduler's
    del pods["inference/p2"]
    apply(dict(pods))
    assert evaluated == ["p0", "p1", "p2", "p1"]
    assert sink.reports[-1] == [f"10.0.0.0:{spec.target_port}"]
    pods["inference/p2"] = _pod("p2", "10.0.0.2")  # back, as a new object
    apply(dict(pods))
    assert evaluated[-1] == "p2"
    assert sink.reports[-1] == [f"10.0.0.0:{spec.target_port}", f"10.0.0.2:{spec.target_port}"]
