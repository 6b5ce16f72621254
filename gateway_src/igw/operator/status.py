"""The status the operator writes on an InferenceGatewayConfig, computed from what it observed.

Conditions (the AWS set, see ``docs/operating.md`` for every reason):

* ``Accepted`` - the latest spec passed admission (``Valid``) or not (``InvalidSpec``,
  ``ModelNameConflict``, with the path-named problems as the message).
* ``AdmissionBlocked`` - the inverse view for dashboards: ``True`` while the latest spec is refused
  and the previous data plane keeps serving.
* ``GatewayProgrammed`` - the data-plane objects were applied (``Programmed``), could not be
  (``ApplyFailed``), never were because no spec was ever admitted (``NotProgrammed``), or the
  served ConfigMap was rewritten outside the operator into no valid config (``ServedConfigInvalid``),
  or what runs could not be read (``ObserveFailed``: the API server refused a read, RBAC or a policy).
* ``BBRReady`` - body-based routing is on and a gateway replica is ready (``Ready``), waiting
  (``GatewayNotReady``; ``NoReadyEndpoints`` while no model-server pod is ready, as ``Ready``
  says, since body-based routing runs in the gateway pods), or switched off (``Disabled``).
* ``Ready`` - programmed, at least one gateway replica ready and every scheduler has a ready
  endpoint (``Ready``), else the first reason that fails; with no ready model-server pod at all
  ``NoReadyEndpoints`` before ``GatewayNotReady``, since a gateway pod is ready only once some
  scheduler has one (its ``/readyz``): an unready Deployment is then the effect, not the cause.

``schedulers[]`` reports, per scheduler of the spec being served, model-server pods found / ready /
stale (ready, but a requirement for its signals fails), the missing signals in words,
``rolloutState``, and two conditions: ``Ready`` (``Ready``, or ``NotProgrammed``, ``NoEndpoints``,
``NoReadyEndpoints``) and ``Available`` (``Available``, or ``Pending``, ``Progressing``,
``NoReadyEndpoints``, ``MissingSignals``); until session s41 AWS's ``schedulers[].conditions`` was
declared in the CRD and never written. A condition keeps its ``lastTransitionTime`` until its
status changes; every change of status or reason of the object's own conditions is a
:class:`Transition`, which the operator posts as an Event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from igw.config.model_servers import Verdict, check_model_server
from igw.operator.admission import Refusal

CONDITION_TYPES: Final = ("Accepted", "AdmissionBlocked", "GatewayProgrammed", "BBRReady", "Ready")
MAX_CONDITION_MESSAGE: Final = 32768
"""``metav1.Condition``'s limit (the CRD's status schema says so too): the API server refuses a status
with a longer message, so the whole status write failed and the pass ended in a traceback. A spec
with 100 invalid schedulers gives about 50,000 characters of problems."""


def bounded_message(message: str) -> str:
    """``message`` cut to :data:`MAX_CONDITION_MESSAGE` characters, saying where to read the rest."""
    if len(message) <= MAX_CONDITION_MESSAGE:
        return message
    rest = f" ... ({len(message):,} characters in all; igw validate lists every problem)"
    return message[: MAX_CONDITION_MESSAGE - len(rest)] + rest


@dataclass(frozen=True, slots=True)
class Transition:
    """One condition changing status or reason (becomes a Kubernetes Event)."""

    type: str
    status: str
    reason: str
    message: str

    @property
    def warning(self) -> bool:
        """Whether the new state needs attention (a feature switched off on purpose does not)."""
        healthy = "False" if self.type == "AdmissionBlocked" else "True"
        return self.status != healthy and self.reason != "Disabled"


@dataclass(frozen=True, slots=True)
class Observation:
    """What the operator saw of one object's data plane in this pass."""

    refusal: Refusal | None
    programmed: bool
    """The data plane of the served spec exists (applied in this pass or earlier)."""
    apply_error: str | None
    served_spec: Mapping[str, Any] | None
    """The spec the gateway serves (the rendered ConfigMap), ``None`` before the first admission."""
    deployment: Mapping[str, Any] | None
    service: Mapping[str, Any] | None
    pods: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    """Model-server pods matching each served scheduler's selector, by scheduler name."""
    tls_problem: tuple[str, str] | None = None
    """``(reason, message)`` while ``spec.tls: {}`` has no certificate in ACM yet."""
    tls_status: Mapping[str, Any] | None = None
    """``status.tls`` of the auto-issued certificate (``acmArn``, ``issuedAt``, ``dnsNames``)."""
    tls_retired: bool = False
    """The spec stopped asking for auto-issue and the imported certificate was deleted."""
    tls_renewal: str | None = None
    """Why cert-manager is not renewing the auto-issued certificate served (still served), else ``None``."""
    tls_issuer: str | None = None
    """Why the issuer of the auto-issued certificate being served cannot renew it (gone, not Ready)."""
    tls_reissue: str | None = None
    """The auto-issued certificate's Secret holds none while the one issued before is still served from
    ACM (cert-manager issues anew): what is served meanwhile, else ``None``."""
    apply_reason: str = "ApplyFailed"
    """GatewayProgrammed's reason while ``apply_error`` is set: ``NamespaceTerminating`` when the
    API server refused only because the namespace is being deleted."""
    served_problem: str | None = None
    """Why the ConfigMap the gateway pods serve holds no valid InferenceGatewayConfig (edited outside
    the operator while the object's own spec is refused), else ``None``."""
    observe_error: str | None = None
    """Why the operator could not read what runs (the API server refused reading the served ConfigMap,
    the Deployment, the Service or the model-server pods: RBAC, a policy), else ``None``."""
    network_policy: bool = True
    """Whether the data plane includes a NetworkPolicy (``igw operator --no-gateway-network-policy``)."""


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    if (pod.get("metadata") or {}).get("deletionTimestamp") or status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _signal_problems(pod: Mapping[str, Any], engine: str) -> list[str]:
    """Failed model-server requirements: each one leaves the scheduler without a signal it scores on
    (every rule in the requirements table is about the metrics: version, flags, KV-cache names)."""
    problems: list[str] = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        env = {str(e.get("name")): str(e.get("value", "")) for e in container.get("env") or []}
        args = [*(container.get("command") or []), *(container.get("args") or [])]
        try:
            check = check_model_server(
                engine=engine, image=str(container.get("image", "")), args=args, env=env
            )
        except ValueError:
            continue
        problems += [
            f"{container.get('name')}: {result.message}"
            for result in check.results
            if result.verdict is Verdict.FAIL
        ]
    return problems


def _deployment_ready(deployment: Mapping[str, Any] | None) -> tuple[int, bool]:
    """Ready gateway replicas, and whether a rollout is still under way."""
    if deployment is None:
        return 0, True
    spec, status = deployment.get("spec") or {}, deployment.get("status") or {}
    desired = int(spec.get("replicas", 1))
    ready = int(status.get("readyReplicas", 0))
    updated = int(status.get("updatedReplicas", 0))
    generation = int((deployment.get("metadata") or {}).get("generation", 0))
    rolling = int(status.get("observedGeneration", 0)) < generation or updated < desired or ready < desired
    return ready, rolling


def _scheduler_status(
    scheduler: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], *, programmed: bool, gateway_ready: bool
) -> dict[str, Any]:
    engine = str(scheduler.get("engineType", "vllm"))
    ready_pods = [p for p in pods if _pod_ready(p)]
    missing: list[str] = []
    stale = 0
    for pod in ready_pods:
        problems = _signal_problems(pod, engine)
        stale += bool(problems)
        missing += [m for m in problems if m not in missing]
    if not programmed or not pods:
        state = "Pending"
    elif not gateway_ready:
        state = "Progressing"
    elif not ready_pods or missing:
        state = "Degraded"
    else:
        state = "Available"
    return {
        "name": str(scheduler.get("name")),
        "conditions": _scheduler_conditions(
            state, found=len(pods), ready=len(ready_pods), missing=missing, programmed=programmed
        ),
        "currentScheduler": str(scheduler.get("scheduler", "llm-d")),
        "rolloutState": state,
        "endpoints": {"found": len(pods), "ready": len(ready_pods), "stale": stale},
        "missingSignals": missing,
    }


def _scheduler_conditions(
    state: str, *, found: int, ready: int, missing: Sequence[str], programmed: bool
) -> dict[str, tuple[str, str, str]]:
    """``{type: (status, reason, message)}`` of one scheduler: ``Ready`` (a ready model-server pod
    to route to) and ``Available`` (``rolloutState`` is Available: ready pods, the gateway rolled
    out, every routing signal readable), each with the reason a dashboard or ``kubectl wait`` needs."""
    if not programmed:
        ready_condition = ("False", "NotProgrammed", "the gateway's data plane is not programmed yet")
    elif found == 0:
        ready_condition = ("False", "NoEndpoints", "no pod matches this scheduler's modelSelector")
    elif ready == 0:
        ready_condition = (
            "False",
            "NoReadyEndpoints",
            f"{found} pod(s) match the modelSelector; none is Running and Ready",
        )
    else:
        ready_condition = ("True", "Ready", f"{ready} of {found} matching model-server pod(s) ready")
    if state == "Available":
        available = ("True", "Available", f"{ready} ready pod(s), every routing signal readable")
    elif state == "Progressing":
        available = ("False", "Progressing", "the gateway is rolling out")
    elif state == "Degraded" and missing:
        available = ("False", "MissingSignals", "routing signals missing: " + "; ".join(missing))
    elif state == "Degraded":
        available = ("False", "NoReadyEndpoints", ready_condition[2])
    else:
        available = ("False", "Pending", ready_condition[2])
    return {"Ready": ready_condition, "Available": available}


def _stamped(
    computed: Mapping[str, tuple[str, str, str]],
    previous: Sequence[Mapping[str, Any]],
    *,
    generation: int,
    stamp: str,
) -> tuple[list[dict[str, Any]], list[Transition]]:
    """``computed`` as ``metav1.Condition`` entries, each keeping the ``lastTransitionTime`` of
    ``previous`` while its status stays, and the transitions (status or reason changed)."""
    before_by_type = {c.get("type"): c for c in previous if isinstance(c, Mapping)}
    conditions: list[dict[str, Any]] = []
    transitions: list[Transition] = []
    for kind, (status, reason, full_message) in computed.items():
        message = bounded_message(full_message)
        before = before_by_type.get(kind) or {}
        changed_status = before.get("status") != status
        if changed_status or before.get("reason") != reason:
            transitions.append(Transition(kind, status, reason, message))
        conditions.append(
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "observedGeneration": generation,
                "lastTransitionTime": stamp if changed_status else before.get("lastTransitionTime", stamp),
            }
        )
    return conditions, transitions


def _address(service: Mapping[str, Any] | None) -> str:
    if service is None:
        return ""
    ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    for entry in ingress:
        if entry.get("hostname") or entry.get("ip"):
            return str(entry.get("hostname") or entry.get("ip"))
    meta = service.get("metadata") or {}
    return f"{meta.get('name')}.{meta.get('namespace')}.svc"


def _conditions(
    igwc: Mapping[str, Any], seen: Observation, schedulers: list[dict[str, Any]]
) -> dict[str, tuple[str, str, str]]:
    """``{type: (status, reason, message)}`` for every condition type."""
    spec = seen.served_spec or {}
    gateway_ready, _ = _deployment_ready(seen.deployment)
    refused = seen.refusal
    out: dict[str, tuple[str, str, str]] = {}
    if refused is None:
        out["Accepted"] = ("True", "Valid", "the spec passed schema, admission and conflict checks")
        out["AdmissionBlocked"] = ("False", "Admitted", "the latest spec is the one being served")
    else:
        out["Accepted"] = ("False", refused.reason, refused.message)
        keeps = "the previous data plane keeps serving" if seen.programmed else "no data plane exists yet"
        out["AdmissionBlocked"] = ("True", refused.reason, f"the latest spec was refused; {keeps}")
    if seen.apply_error is not None:
        out["GatewayProgrammed"] = ("False", seen.apply_reason, seen.apply_error)
    elif seen.observe_error is not None:
        out["GatewayProgrammed"] = ("False", "ObserveFailed", seen.observe_error)
    elif seen.tls_problem is not None:
        out["GatewayProgrammed"] = ("False", *seen.tls_problem)
    elif seen.served_problem is not None:
        message = f"{seen.served_problem}; it is rewritten once the object's spec is admitted"
        out["GatewayProgrammed"] = ("False", "ServedConfigInvalid", message)
    elif seen.programmed:
        applied = (
            "Deployment, Service, configuration, RBAC, PDB and NetworkPolicy applied"
            if seen.network_policy
            else "Deployment, Service, configuration, RBAC and PDB applied (gateway NetworkPolicies are off)"
        )
        if seen.tls_status:
            applied += f"; TLS listener with the auto-issued certificate {seen.tls_status.get('acmArn')}"
        if seen.tls_reissue:
            applied += f"; REISSUING: {seen.tls_reissue}"
        if seen.tls_renewal:
            applied += f"; RENEWAL FAILING: {seen.tls_renewal}"
        if seen.tls_issuer:
            applied += f"; RENEWAL AT RISK: {seen.tls_issuer}"
        out["GatewayProgrammed"] = ("True", "Programmed", applied)
    elif refused is not None:
        # A refused spec's pass restores the last admitted one's data plane; it found none to restore.
        out["GatewayProgrammed"] = (
            "False",
            "NotProgrammed",
            f"the latest spec is refused ({refused.reason}) and no admitted spec of this object is at "
            "hand to serve: none was admitted yet, or its served ConfigMap is gone since the operator "
            "last restarted",
        )
    else:
        out["GatewayProgrammed"] = ("False", "NotProgrammed", "no spec of this object has been admitted yet")
    without = [s["name"] for s in schedulers if s["endpoints"]["ready"] == 0]
    # A gateway pod's /readyz needs a Ready model-server pod of some scheduler, so with none the
    # gateway cannot become ready: that is the cause to report, not the unready Deployment.
    no_model_server = gateway_ready == 0 and bool(schedulers) and len(without) == len(schedulers)
    if not (spec.get("bbr") or {}).get("enabled", True):
        out["BBRReady"] = (
            "False",
            "Disabled",
            "body-based routing is switched off (spec.bbr.enabled: false)",
        )
    elif seen.observe_error is not None:
        out["BBRReady"] = ("False", "ObserveFailed", seen.observe_error)
    elif gateway_ready > 0:
        out["BBRReady"] = (
            "True",
            "Ready",
            f"{gateway_ready} gateway replica(s) route by the request body's model",
        )
    elif no_model_server and out["GatewayProgrammed"][0] == "True":
        out["BBRReady"] = (
            "False",
            "NoReadyEndpoints",
            "no gateway replica is ready, and none can be before a model-server pod of some scheduler "
            "is (body-based routing runs in the gateway pods)",
        )
    else:
        out["BBRReady"] = ("False", "GatewayNotReady", "no gateway replica is ready yet")
    if out["GatewayProgrammed"][0] != "True":
        out["Ready"] = ("False", "NotProgrammed", out["GatewayProgrammed"][2])
    elif no_model_server:
        out["Ready"] = (
            "False",
            "NoReadyEndpoints",
            f"no ready model-server pod for scheduler(s): {', '.join(without)} (a gateway replica "
            "reports ready only once some scheduler has one, so none is ready yet)",
        )
    elif gateway_ready == 0:
        out["Ready"] = (
            "False",
            "GatewayNotReady",
            "no gateway replica is ready yet (a gateway pod's /readyz on the management port says "
            "why: e.g. the JWKS not loaded, or the pod not started)",
        )
    elif without:
        out["Ready"] = (
            "False",
            "NoReadyEndpoints",
            f"no ready model-server pod for scheduler(s): {', '.join(without)}",
        )
    else:
        out["Ready"] = (
            "True",
            "Ready",
            f"{gateway_ready} gateway replica(s) serving {len(schedulers)} scheduler(s)",
        )
    return out


def compute_status(
    igwc: Mapping[str, Any], seen: Observation, *, now: datetime
) -> tuple[dict[str, Any], list[Transition]]:
    """The new ``status`` of ``igwc`` and the condition transitions since its current status."""
    spec = seen.served_spec or {}
    gateway_ready, rolling = _deployment_ready(seen.deployment)
    schedulers = [
        _scheduler_status(
            s,
            seen.pods.get(str(s.get("name")), []),
            programmed=seen.programmed,
            gateway_ready=gateway_ready > 0 and not rolling,
        )
        for s in spec.get("schedulers") or []
    ]
    generation = int((igwc.get("metadata") or {}).get("generation", 0))
    old_status = igwc.get("status") or {}
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions, transitions = _stamped(
        _conditions(igwc, seen, schedulers),
        old_status.get("conditions") or [],
        generation=generation,
        stamp=stamp,
    )
    previous_schedulers = {
        s.get("name"): s for s in old_status.get("schedulers") or [] if isinstance(s, Mapping)
    }
    for entry in schedulers:
        before = previous_schedulers.get(entry["name"]) or {}
        # per-scheduler changes are not Events: the object's Ready names the schedulers at fault
        entry["conditions"], _ = _stamped(
            entry["conditions"], before.get("conditions") or [], generation=generation, stamp=stamp
        )
    status_body: dict[str, Any] = {
        "observedGeneration": generation,
        "conditions": conditions,
        "schedulers": schedulers,
        "models": ", ".join(str(s.get("modelName")) for s in spec.get("schedulers") or []),
        "readyEndpoints": sum(s["endpoints"]["ready"] for s in schedulers),
        "address": _address(seen.service),
    }
    acm_arn = (spec.get("tls") or {}).get("acmArn") if isinstance(spec.get("tls"), dict) else None
    previous_tls = (igwc.get("status") or {}).get("tls")
    if seen.tls_retired:
        status_body["tls"] = None  # merge patch: removes the auto-issued certificate's status
    elif seen.tls_status:
        status_body["tls"] = dict(seen.tls_status)
    elif isinstance(previous_tls, Mapping) and previous_tls.get("issuedAt"):
        # An auto-issued certificate not deleted yet (ACM refuses while the load balancer still
        # uses it): its status stays until it is, since it is all that names the certificate to
        # delete. Replaced by a given ``acmArn``'s, the next pass deleted nothing and the import
        # stayed in ACM for good.
        status_body["tls"] = previous_tls
    elif acm_arn and seen.programmed:
        status_body["tls"] = {"acmArn": str(acm_arn)}
    elif previous_tls:
        status_body["tls"] = previous_tls
    return status_body, transitions


def namespace_terminating_conditions(
    igwc: Mapping[str, Any], message: str, *, now: datetime
) -> list[dict[str, Any]] | None:
    """``igwc``'s conditions with ``GatewayProgrammed`` ``False``/``NamespaceTerminating`` (``message``),
    the others as they are; ``None`` when it already says so. For a config whose namespace the
    operator knows is being deleted: the pass stops there, reading nothing of a data plane the
    namespace controller is removing, so only that condition can be said anew."""
    previous = [c for c in (igwc.get("status") or {}).get("conditions") or [] if isinstance(c, Mapping)]
    current = next((c for c in previous if c.get("type") == "GatewayProgrammed"), {})
    if (current.get("status"), current.get("reason")) == ("False", "NamespaceTerminating"):
        return None
    generation = int((igwc.get("metadata") or {}).get("generation", 0))
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    programmed, _ = _stamped(
        {"GatewayProgrammed": ("False", "NamespaceTerminating", message)},
        previous,
        generation=generation,
        stamp=stamp,
    )
    kept = [dict(c) for c in previous if c.get("type") != "GatewayProgrammed"]
    by_type = {str(c.get("type")): c for c in [*kept, *programmed]}
    ordered = [by_type[kind] for kind in CONDITION_TYPES if kind in by_type]
    return ordered + [c for kind, c in by_type.items() if kind not in CONDITION_TYPES]
