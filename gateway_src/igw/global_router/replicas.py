"""One cluster's state from its gateway replicas' heartbeats: which replicas are live, and the merge.

Each replica of a cluster's tier-1 gateway publishes its own heartbeat (a field of the cluster's
hash, :mod:`igw.gateway.heartbeat`). The routing policy and the health tracking read one heartbeat
per cluster, so :class:`ReplicaMerge` turns the replicas' documents into one:

- **Live replicas**: a replica is live while its ``seq`` changed within ``staleness_s`` on the
  router's clock (the cluster-level rule of :mod:`igw.global_router.health`, per replica). A replica
  killed without stopping leaves its last document behind until another replica prunes it; it stops
  counting once stale. When no replica is live, all of them are merged and the merged ``seq`` stops
  changing, so the cluster goes stale as a whole.
- **The merged ``seq``** advances whenever any replica's ``seq`` changed since the last read: the
  cluster is fresh while any replica is.
- **Draining**: the cluster drains only when every live replica says so (the last replicas of a
  cluster being shut down). A replica draining in a rolling update is left out of the load figures
  while another serves: the load balancer in front of the replicas sends it nothing new.
- **Load**: the replicas route to the same pods, so pod counts and queue depth are the largest any
  replica reports (a replica that cannot reach the pods says nothing about the others); saturation is
  the mean (the load balancer spreads requests evenly over the replicas); TTFT quantiles are the
  largest (a quantile of the merged traffic lies between the replicas' own, so the largest is an
  upper bound, the side the SLO checks err on); request and 429 rates are summed; models are every
  replica's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from igw.gateway.heartbeat_message import FORMAT_VERSION, Heartbeat, PoolLoad


class ReplicaMerge:
    """The merged heartbeat of one cluster, read after read (state: each replica's last ``seq`` and
    when it changed, and the merged ``seq``)."""

    def __init__(self, *, staleness_s: float) -> None:
        self._staleness_s = staleness_s
        self._seen: dict[str, tuple[int, float]] = {}
        self._seq = 0

    def merge(self, beats: Mapping[str, Heartbeat], *, now: float) -> Heartbeat | None:
        """The cluster's heartbeat from ``beats`` (replica name → its well-formed document) read at
        ``now``; ``None`` when there is none."""
        if not beats:
            self._seen = {}
            return None
        seen: dict[str, tuple[int, float]] = {}
        changed = False
        for replica, beat in beats.items():
            last = self._seen.get(replica)
            if last is None or last[0] != beat.seq:
                seen[replica] = (beat.seq, now)
                changed = True
            else:
                seen[replica] = last
        self._seen = seen  # replicas whose field is gone are forgotten
        if changed:
            self._seq += 1
        live = [beat for replica, beat in beats.items() if now - seen[replica][1] <= self._staleness_s]
        counted = live or list(beats.values())
        draining = all(beat.draining for beat in counted)
        serving = counted if draining else [beat for beat in counted if not beat.draining]
        return merged(serving, seq=self._seq, draining=draining)


def merged(beats: Sequence[Heartbeat], *, seq: int, draining: bool) -> Heartbeat:
    """One heartbeat standing for ``beats`` (one cluster's replicas, at least one) by the rules of the
    module docstring, with ``seq`` and ``draining`` as given."""
    first = beats[0]
    if len(beats) == 1:
        return dataclasses.replace(first, seq=seq, draining=draining)
    return Heartbeat(
        cluster=first.cluster,
        region=first.region,
        seq=seq,
        sent_at=max(b.sent_at for b in beats),
        models=tuple(sorted({model for b in beats for model in b.models})),
        endpoints_total=max(b.endpoints_total for b in beats),
        endpoints_fresh=max(b.endpoints_fresh for b in beats),
        saturation=sum(b.saturation for b in beats) / len(beats),
        queue_depth=max(b.queue_depth for b in beats),
        ttft_p50_s=_largest(b.ttft_p50_s for b in beats),
        ttft_p90_s=_largest(b.ttft_p90_s for b in beats),
        ttft_p99_s=_largest(b.ttft_p99_s for b in beats),
        rate_429_per_s=sum(b.rate_429_per_s for b in beats),
        requests_per_s=sum(b.requests_per_s for b in beats),
        draining=draining,
        pools=_merged_pools(beats),
        version=FORMAT_VERSION,
    )


def _largest(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _merged_pools(beats: Sequence[Heartbeat]) -> dict[str, PoolLoad]:
    """Each pool any replica reports, its figures merged over the replicas that report it."""
    by_name: dict[str, list[PoolLoad]] = {}
    for beat in beats:
        for name, pool in beat.pools.items():
            by_name.setdefault(name, []).append(pool)
    return {
        name: PoolLoad(
            model=pools[0].model,
            endpoints_total=max(p.endpoints_total for p in pools),
            endpoints_fresh=max(p.endpoints_fresh for p in pools),
            saturation=sum(p.saturation for p in pools) / len(pools),
            queue_depth=max(p.queue_depth for p in pools),
            adapters=tuple(sorted({adapter for p in pools for adapter in p.adapters})),
        )
        for name, pools in by_name.items()
    }
