"""Leader election on a ``coordination.k8s.io/v1`` Lease, so that one of several replicas acts.

This uses the official client's ``kubernetes.leaderelection`` (a LeaseLock and its renew loop)
rather than kopf's peering: kopf's peering pauses lower-priority peers but lets peers of equal
priority run side by side, and every operator replica runs with the same settings. The election
runs in a daemon thread (the client is synchronous); winning and losing are handed to the event
loop as two :class:`asyncio.Event`. A replica that loses its lease stops acting at once and never
tries to lead again in this process: it exits so Kubernetes restarts it as a fresh candidate.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ElectionSettings:
    lease_name: str
    lease_namespace: str
    identity: str
    lease_duration_s: int = 8
    """A dead leader's lease is taken over this long (plus a retry period) after its last renewal."""
    renew_deadline_s: int = 5
    retry_period_s: int = 2


class LeaseElection:
    """Campaigns for the Lease in a thread; :attr:`leading` and :attr:`lost` are set on the loop."""

    def __init__(self, settings: ElectionSettings, api_client: Any) -> None:
        self.settings = settings
        self.leading = asyncio.Event()
        self.lost = asyncio.Event()
        self._api_client = api_client
        self._loop = asyncio.get_running_loop()
        self._thread: threading.Thread | None = None
        self._release = threading.Event()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._campaign, name="lease-election", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._release.set()

    def _campaign(self) -> None:
        # deferred: start-up cost: the kubernetes client loads only on cluster-facing paths
        from kubernetes import client
        from kubernetes.leaderelection import electionconfig, leaderelection
        from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

        lock = LeaseLock(  # type: ignore[no-untyped-call]
            self.settings.lease_name, self.settings.lease_namespace, self.settings.identity
        )
        lock.api_instance = client.CoordinationV1Api(self._api_client)
        config = electionconfig.Config(  # type: ignore[no-untyped-call]
            lock,
            lease_duration=self.settings.lease_duration_s,
            renew_deadline=self.settings.renew_deadline_s,
            retry_period=self.settings.retry_period_s,
            onstarted_leading=self._on_started,
            onstopped_leading=self._on_stopped,
        )
        leaderelection.LeaderElection(config).run()  # type: ignore[no-untyped-call]

    def _on_started(self) -> None:
        self._loop.call_soon_threadsafe(self.leading.set)
        self._release.wait()

    def _on_stopped(self) -> None:
        self._loop.call_soon_threadsafe(self.lost.set)
