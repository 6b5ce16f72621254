"""Which pods and containers are model servers, and what engine they run.

The scheduler config says ``engineType``; the pod says what really runs. We read the engine from
the container's argv first (``vllm serve``, ``python -m sglang.launch_server``) because it decides,
then from the image repository name, with the detection tokens of the engine catalogue. Pods are
grouped by identical (image, argv, env) so a 1,000-pod deployment yields one verdict per distinct
container, not a thousand copies.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from igw.checks.framework import CheckContext
from igw.checks.igwc import SchedulerEntry, schedulers
from igw.checks.inventory import Manifest, need
from igw.checks.k8s import container_args, container_env, container_ports, is_pod_ready, ref
from igw.checks.selectors import by_namespace, matching, selector_from_mapping
from igw.config.image_refs import parse_image_reference
from igw.engines import ENGINES
from igw.engines import detect_engine as detect_in

DEFAULT_PORTS: Final[Mapping[str, int]] = {name: e.default_port for name, e in ENGINES.items()}
"""Port each engine listens on when ``--port`` is not given (from the engine catalogue)."""


def detect_engine(image: str, argv: Sequence[str]) -> str | None:
    """The engine a container runs: from its argv first (it decides), else its image repository."""
    found = detect_in(" ".join(argv))
    if found is None:
        try:
            repository = parse_image_reference(image).repository
        except ValueError:
            repository = image
        found = detect_in(repository)
    return None if found is None else found.name


def listen_port(engine: str | None, argv: Sequence[str]) -> int | None:
    """``--port N``/``--port=N`` from argv, else the engine's default, else ``None``."""
    for index, token in enumerate(argv):
        value: str | None = None
        if token == "--port" and index + 1 < len(argv):
            value = argv[index + 1]
        elif token.startswith("--port="):
            value = token.split("=", 1)[1]
        if value is not None and value.isdigit():
            return int(value)
    return DEFAULT_PORTS.get(engine or "")


def server_container(pod: Manifest, target_port: int) -> Mapping[str, Any] | None:
    """The container serving the model: the one declaring ``targetPort``, else one that looks like an
    engine, else the only container."""
    items = [c for c in (pod.get("spec") or {}).get("containers") or [] if isinstance(c, Mapping)]
    for container in items:
        if target_port in container_ports(container):
            return container
    for container in items:
        if detect_engine(str(container.get("image", "")), container_args(container)):
            return container
    return items[0] if len(items) == 1 else None


@dataclass(frozen=True, slots=True)
class ServerGroup:
    """Pods of one scheduler sharing the same model-server container."""

    scheduler: SchedulerEntry
    container: Mapping[str, Any]
    pods: tuple[Manifest, ...]

    @property
    def image(self) -> str:
        return str(self.container.get("image", ""))

    @property
    def argv(self) -> list[str]:
        return container_args(self.container)

    @property
    def env(self) -> dict[str, str]:
        return container_env(self.container)

    @property
    def resource(self) -> str:
        more = f" (+{len(self.pods) - 1} more with the same container)" if len(self.pods) > 1 else ""
        return f"{self.scheduler.resource}: {ref(self.pods[0])}{more}"


def server_groups(ctx: CheckContext) -> Iterator[ServerGroup | SchedulerEntry]:
    """For each scheduler, its model-server groups; a bare :class:`SchedulerEntry` when nothing matches
    (the selector check reports that; others skip it)."""
    configs = need(ctx.inventory.kube.of("InferenceGatewayConfig"))
    pods = by_namespace(need(ctx.inventory.kube.of("Pod")))
    for config in configs:
        for sched in schedulers(config):
            try:
                selector = selector_from_mapping(sched.model_selector)
            except ValueError:
                yield sched
                continue
            matched = [
                p
                for p in matching(selector, pods.get(sched.namespace, []), namespace=sched.namespace)
                if is_pod_ready(p) is not False
            ]
            groups: dict[str, tuple[Mapping[str, Any], list[Manifest]]] = {}
            for pod in matched:
                container = server_container(pod, sched.target_port)
                if container is None:
                    continue
                key = repr(
                    (
                        container.get("image"),
                        container_args(container),
                        sorted(container_env(container).items()),
                        container_ports(container),
                    )
                )
                groups.setdefault(key, (container, []))[1].append(pod)
            if not groups:
                yield sched
            for container, members in groups.values():
                yield ServerGroup(sched, container, tuple(members))
