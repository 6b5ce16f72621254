"""``igw operator``: turn every InferenceGatewayConfig into a running gateway, with status and events.

Examples::

    igw operator                                     # in a pod: the service account, all namespaces
    igw operator --namespace inference --namespace team-b
    igw operator --kubeconfig ~/.kube/config --no-leader-election   # from a workstation, alone

Exit codes: 0 stopped (SIGTERM / Ctrl-C), 1 the operator framework stopped with an error, 2 bad
usage or no cluster access, 3 the leader Lease was lost (the process exits so that Kubernetes
restarts it as a fresh candidate). A SIGTERM or Ctrl-C in its first second or so, while ``igw`` still
imports and parses its arguments, ends it with 143 / 130 like any igw command, without a traceback;
one that comes later but before it has connected stops it with 0 before it touches the cluster.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, Final

from igw.cli.arg_types import (
    GATEWAY_EMF_INTERVAL,
    OPERATOR_RESYNC,
    PORT,
    TLS_SWEEP_INTERVAL,
    WORKER_COUNT,
    WORKER_TIMEOUT,
    NumberRange,
    cidr_block,
    container_image,
    env_assignment,
    existing_file,
    http_url,
    namespace_name,
    object_name,
)
from igw.cli.option_scope import refuse_given
from igw.errors import IgwToolingError
from igw.gateway.worker_heartbeat import STUCK_AFTER_S

if TYPE_CHECKING:
    from igw.operator.runner import OperatorOptions

API_THREAD_COUNT: Final = NumberRange(int, 1, 256)
"""``--api-threads``: 1 to :data:`igw.operator.kube.MAX_API_THREADS` (not imported: the CLI builds
every command's parser, and the operator's modules load only when this one runs)."""

LEASE_DURATION: Final = NumberRange(
    int,
    3,
    300,
    reason="seconds a dead leader's Lease stands before a standby may take it, nothing reconciling "
    "meanwhile: above the renew deadline, at most 5 minutes",
)
RENEW_DEADLINE: Final = NumberRange(
    int,
    2,
    299,
    reason="seconds a leader acts without a successful renewal: above 1.2 x the retry period and below "
    "the lease duration",
)
RETRY_PERIOD: Final = NumberRange(
    int,
    1,
    60,
    reason="seconds between Lease tries, each call given three quarters of it: at least 1 (the "
    "election library's least), at most a minute",
)
"""``--lease-duration`` / ``--renew-deadline`` / ``--retry-period`` (whole seconds: a Lease's
``leaseDurationSeconds`` is an integer); the rules between them are checked once all are parsed
(:func:`igw.operator.election.election_problems`)."""

ELECTION_FLAGS: Final = ("--lease-duration", "--renew-deadline", "--retry-period")

HELP = "Run the operator: reconcile InferenceGatewayConfig objects into gateway data planes."

EXIT_USAGE = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        type=existing_file,
        metavar="FILE",
        help="use this kubeconfig instead of the pod's account",
    )
    parser.add_argument(
        "--namespace",
        action="append",
        type=namespace_name,
        default=[],
        metavar="NS",
        help="watch only this namespace (repeatable); default: all namespaces",
    )
    parser.add_argument(
        "--gateway-image",
        type=container_image,
        default="public.ecr.aws/igw/inference-gateway:0.1.0",
        metavar="IMAGE",
        help="image of the gateway pods the operator creates "
        "(default public.ecr.aws/igw/inference-gateway:0.1.0)",
    )
    parser.add_argument(
        "--gateway-workers",
        type=WORKER_COUNT,
        default="auto",
        metavar="N|auto",
        help="igw serve --workers of the gateway pods the operator creates; auto: one per core of the "
        "pod's CPU request (spec.podDefaults.resources), bounded by its limits (default auto)",
    )
    parser.add_argument(
        "--gateway-worker-timeout",
        type=WORKER_TIMEOUT,
        default=STUCK_AFTER_S,
        metavar="S",
        help="igw serve --worker-timeout of those pods (when they run more than one worker): a worker "
        "whose event loop is silent for S seconds is killed and the container restarts; 0: off, else 2 to "
        "3600 "
        f"(default {STUCK_AFTER_S:g})",
    )
    parser.add_argument(
        "--gateway-https-egress-cidr",
        action="append",
        type=cidr_block,
        default=[],
        metavar="CIDR",
        help="a destination of the gateway pods' HTTPS egress in their NetworkPolicy (API server, JWKS, "
        "AWS APIs; repeatable; default 0.0.0.0/0 and ::/0, both address families)",
    )
    parser.add_argument(
        "--gateway-dns-cidr",
        action="append",
        type=cidr_block,
        default=[],
        metavar="CIDR",
        help="a resolver the gateway pods' NetworkPolicy opens port 53 to besides the kube-dns pods, e.g. "
        "169.254.20.10/32 for a NodeLocal DNSCache (host network, which no pod selector matches); "
        "repeatable",
    )
    parser.add_argument(
        "--gateway-ingress-cidr",
        action="append",
        type=cidr_block,
        default=[],
        metavar="CIDR",
        help="a source admitted on the gateway pods' inference port by their NetworkPolicy (the load "
        "balancer, in-VPC clients; repeatable; default the private IPv4 ranges 10.0.0.0/8, "
        "172.16.0.0/12, 192.168.0.0/16 and ::/0); the metrics port admits pods of the cluster only",
    )
    parser.add_argument(
        "--gateway-extra-egress",
        action="append",
        type=_egress_rule,
        default=[],
        metavar="JSON",
        help="an egress rule added to every gateway pod's NetworkPolicy, a NetworkPolicyEgressRule as "
        'JSON (e.g. \'{"to": [{"ipBlock": {"cidr": "10.0.0.5/32"}}], "ports": [{"port": 3128}]}\' for an '
        "HTTPS proxy); repeatable. The ports each config needs (model servers, JWKS, Redis, "
        "observability) are opened without one, and a NodeLocal DNSCache with --gateway-dns-cidr",
    )
    parser.add_argument(
        "--no-gateway-network-policy",
        action="store_true",
        help="make no NetworkPolicy for the gateways (and delete the ones made before), e.g. where "
        "another policy engine governs their traffic",
    )
    observability = parser.add_argument_group("gateway pods' observability (off by default)")
    observability.add_argument(
        "--gateway-emf-interval",
        type=GATEWAY_EMF_INTERVAL,
        default=0,
        metavar="SECONDS",
        help="gateway pods write CloudWatch EMF documents every SECONDS, 1 to 3600 (default 0: off)",
    )
    observability.add_argument(
        "--gateway-emf-endpoint",
        metavar="tcp://HOST:PORT|udp://HOST:PORT",
        help="with --gateway-emf-interval: the CloudWatch agent's EMF listener the pods send to, e.g. "
        "tcp://cloudwatch-agent.amazon-cloudwatch:25888 (default: the pods' stdout)",
    )
    observability.add_argument(
        "--gateway-otlp-endpoint",
        type=http_url,
        metavar="URL",
        help="OTEL_EXPORTER_OTLP_ENDPOINT of the gateway pods: they export traces there",
    )
    observability.add_argument(
        "--gateway-env",
        action="append",
        type=env_assignment,
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable of every gateway pod (repeatable), e.g. OTEL_BSP_MAX_QUEUE_SIZE=8192 "
        "or OTEL_TRACES_SAMPLER_ARG=0.1; a config's spec.podDefaults.env entry of the same name wins",
    )
    parser.add_argument(
        "--tls-issuer",
        default="ClusterIssuer/igw-selfsigned",
        metavar="KIND/NAME",
        help="cert-manager issuer (Issuer/NAME or ClusterIssuer/NAME) of the certificates auto-issued "
        "for spec.tls: {} and imported into ACM (default ClusterIssuer/igw-selfsigned)",
    )
    parser.add_argument(
        "--no-auto-tls",
        action="store_true",
        help="do not support spec.tls: {} (the operator then never reads Secrets nor touches cert-manager "
        "Certificates, so its RBAC need not grant them); such a config is reported AutoTlsDisabled",
    )
    parser.add_argument(
        "--tls-sweep-seconds",
        type=TLS_SWEEP_INTERVAL,
        default=600.0,
        metavar="S",
        help="how often the leader deletes the ACM imports and Secrets of auto-issued TLS whose config "
        "is gone (one ACM listing each; an import's tags are read once); also once when it starts "
        "leading (default 600; none with --no-auto-tls)",
    )
    parser.add_argument(
        "--resync-seconds",
        type=OPERATOR_RESYNC,
        default=5.0,
        help="how often each object's data plane and status are re-checked (default 5)",
    )
    parser.add_argument(
        "--api-threads",
        type=API_THREAD_COUNT,
        metavar="N",
        help="API calls the operator runs at once, each in a thread of its own pool "
        "(default min(32, cpus + 4), cpus being the node's cores bounded by the container's CPU "
        "limit, rounded up)",
    )
    election = parser.add_argument_group("leader election (a coordination.k8s.io Lease)")
    election.add_argument(
        "--no-leader-election", action="store_true", help="act without a Lease (one replica only)"
    )
    election.add_argument(
        "--lease-name", type=object_name, default="igw-operator", help="default igw-operator"
    )
    election.add_argument(
        "--lease-namespace", type=namespace_name, default="kube-system", help="default kube-system"
    )
    election.add_argument("--identity", help="this replica's holder identity (default: host name and pid)")
    election.add_argument(
        "--lease-duration",
        type=LEASE_DURATION,
        default=15,
        metavar="S",
        help="a standby takes a dead leader's Lease this long after its last renewal (default 15)",
    )
    election.add_argument(
        "--renew-deadline",
        type=RENEW_DEADLINE,
        default=10,
        metavar="S",
        help="the leader steps down (and exits 3) when its last successful renewal began this long ago; "
        "below --lease-duration, above 1.2 x --retry-period (default 10: two hung Lease calls in a row "
        "are ridden out)",
    )
    election.add_argument(
        "--retry-period",
        type=RETRY_PERIOD,
        default=2,
        metavar="S",
        help="seconds between Lease tries; a Lease call slower than three quarters of it counts as "
        "failed (default 2)",
    )
    parser.add_argument(
        "--health-port",
        type=PORT,
        metavar="PORT",
        help="serve GET /healthz on this port (probes; default: none)",
    )
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"], help="(default info)"
    )


def _egress_rule(text: str) -> dict[str, Any]:
    """``--gateway-extra-egress``: one NetworkPolicyEgressRule as JSON, refused naming the field."""
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.operator.egress_rules import EgressRuleError, parse_egress_rule

    try:
        return parse_egress_rule(text)
    except EgressRuleError as exc:
        raise argparse.ArgumentTypeError(f"not a NetworkPolicy egress rule: {exc}") from None


class ElectionFlagsError(IgwToolingError, ValueError):
    """``--lease-duration`` / ``--renew-deadline`` / ``--retry-period`` that break the election's rules
    together (each is within its own bounds), the message naming the flags."""


DEFERS_STOP_SIGNALS = True
"""SIGTERM / Ctrl-C before the loop's handlers are in place are recorded, then acted on
(:mod:`igw.cli.early_stop`): an interrupt inside kopf's imports was turned into a traceback."""


def operator_options(args: argparse.Namespace) -> OperatorOptions:
    """The operator's options from its parsed arguments (what the chart's container args become);
    raises ``TlsIssuerError`` / ``EmfEndpointError`` / ``ElectionFlagsError`` naming the option for a
    value the parser does not check alone."""
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.gateway.emf_sink import AgentEndpoint
    from igw.operator.dataplane import DEFAULT_HTTPS_EGRESS_CIDRS, DEFAULT_INGRESS_CIDRS, DataPlaneSettings
    from igw.operator.election import election_problems
    from igw.operator.runner import OperatorOptions
    from igw.operator.tls import AutoTlsSettings, IssuerRef

    durations = (args.lease_duration, args.renew_deadline, args.retry_period)
    problems = election_problems(*durations, names=ELECTION_FLAGS)
    if problems and not args.no_leader_election:
        raise ElectionFlagsError("; ".join(problems))
    issuer = IssuerRef.parse(args.tls_issuer)
    emf_endpoint = (
        AgentEndpoint.parse(args.gateway_emf_endpoint, source="--gateway-emf-endpoint")
        if args.gateway_emf_endpoint
        else None
    )
    data_plane = DataPlaneSettings(
        image=args.gateway_image,
        workers=args.gateway_workers,
        worker_timeout_s=args.gateway_worker_timeout,
        emf_interval_s=args.gateway_emf_interval,
        emf_endpoint=emf_endpoint,
        otlp_endpoint=args.gateway_otlp_endpoint or "",
        extra_env=tuple(args.gateway_env),
        https_egress_cidrs=tuple(args.gateway_https_egress_cidr) or DEFAULT_HTTPS_EGRESS_CIDRS,
        ingress_cidrs=tuple(args.gateway_ingress_cidr) or DEFAULT_INGRESS_CIDRS,
        dns_cidrs=tuple(args.gateway_dns_cidr),
        extra_egress=tuple(args.gateway_extra_egress),
        network_policy=not args.no_gateway_network_policy,
    )
    return OperatorOptions(
        kubeconfig=args.kubeconfig,
        namespaces=tuple(args.namespace),
        data_plane=data_plane,
        auto_tls=AutoTlsSettings(issuer=issuer, enabled=not args.no_auto_tls),
        resync_s=args.resync_seconds,
        tls_sweep_s=args.tls_sweep_seconds,
        leader_election=not args.no_leader_election,
        lease_name=args.lease_name,
        lease_namespace=args.lease_namespace,
        lease_duration_s=args.lease_duration,
        renew_deadline_s=args.renew_deadline,
        retry_period_s=args.retry_period,
        health_port=args.health_port,
        api_threads=args.api_threads,
        **({"identity": args.identity} if args.identity else {}),
    )


IGNORED_WITH: Final = (
    (
        "no_gateway_network_policy",
        "--no-gateway-network-policy",
        ("gateway_https_egress_cidr", "gateway_ingress_cidr", "gateway_extra_egress"),
    ),
    ("no_auto_tls", "--no-auto-tls", ("tls_issuer", "tls_sweep_seconds")),
    (
        "no_leader_election",
        "--no-leader-election",
        ("lease_name", "lease_namespace", "lease_duration", "renew_deadline", "retry_period"),
    ),
)
"""(switch, as typed, the options it leaves without effect): with the gateways' NetworkPolicy off no
CIDR or egress rule is written anywhere, without auto-TLS nothing is issued or swept, and without
leader election no Lease is taken (and ``--gateway-worker-timeout`` with ``--gateway-workers 1``
below: the pods' single process has no worker group to check)."""


def refuse_ignored_options(args: argparse.Namespace) -> bool:
    """Refuse (print and return ``True``) an option that the switches given leave without effect: each
    was accepted and dropped, so ``--no-gateway-network-policy --gateway-ingress-cidr 10.0.0.0/8`` ran
    with no NetworkPolicy at all and said nothing. The chart passes each only with its switch off."""
    for switch, typed, ignored in IGNORED_WITH:
        if getattr(args, switch) and refuse_given(args, command="igw operator", mode=typed, ignored=ignored):
            return True
    # one worker per pod: no parent process watches it, so the timeout was dropped (igw serve refuses
    # --worker-timeout with --workers 1 the same way)
    if args.gateway_workers == 1 and refuse_given(
        args,
        command="igw operator",
        mode="--gateway-workers 1 (a single process has no worker group to check)",
        ignored=("gateway_worker_timeout",),
    ):
        return True
    return bool(
        not args.gateway_emf_interval
        and refuse_given(
            args,
            command="igw operator",
            mode="--gateway-emf-interval 0 (the default: the gateways write no EMF)",
            ignored=("gateway_emf_endpoint",),
        )
    )


def run(args: argparse.Namespace) -> int:
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    import asyncio
    import contextlib
    import signal

    from igw.cli import early_stop
    from igw.gateway.discovery.kube_client import KubeClientError
    from igw.gateway.emf_sink import EmfEndpointError
    from igw.gateway.redaction import configure_logging
    from igw.gateway.serving import EXIT_LISTEN_FAILED, ListenError
    from igw.gateway.stop_signals import hold_stop_signals, ignore_held_stop_signals
    from igw.operator.dataplane import gateway_env_problem
    from igw.operator.runner import run_operator
    from igw.operator.tls import TlsIssuerError

    configure_logging(args.log_level)
    env_problem = gateway_env_problem(tuple(args.gateway_env))
    if env_problem is not None:
        print(f"igw operator: {env_problem}", file=sys.stderr)
        return EXIT_USAGE
    if refuse_ignored_options(args):
        return EXIT_USAGE
    try:
        options = operator_options(args)
    except (TlsIssuerError, EmfEndpointError, ElectionFlagsError) as exc:
        print(f"igw operator: {exc}", file=sys.stderr)
        return EXIT_USAGE

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        signals = (signal.SIGTERM, signal.SIGINT)
        for signum in signals:
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(signum, stop.set)
        try:
            stopped = early_stop.take()  # came while igw started: stop before touching the cluster
            if stopped is not None:
                print("igw operator: interrupted while starting", file=sys.stderr)
                return 128 + stopped
            return await run_operator(options, stop=stop, stop_signals=signals)
        finally:
            # The loop owns the handlers (kopf's, then ours) and removes them when it closes, which
            # restores the default action: a supervisor's repeated SIGTERM landing then ended the
            # operator with -15. Held from here, ignored (and discarded) once the loop is gone.
            hold_stop_signals(signals)

    try:
        return asyncio.run(main())
    except KubeClientError as exc:
        print(f"igw operator: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ListenError as exc:  # the machine's state (a port in use), not a usage error: as igw serve
        print(f"igw operator: {exc}", file=sys.stderr)
        return EXIT_LISTEN_FAILED
    finally:
        ignore_held_stop_signals()
