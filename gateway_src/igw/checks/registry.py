"""The ONE explicit list of checks. Add a check: write its module, add it here, add its fixtures.

Order is the order of the report; IDs are stable and never reused.
"""

from __future__ import annotations

from typing import Final

from igw.checks.audit import (
    capabilities,
    certificate_names,
    certificates,
    disruption_budget,
    drop_invalid_headers,
    global_router_https,
    iam_trust,
    iam_wildcards,
    internet_facing,
    jwks_host,
    jwt_audience,
    jwt_hardening,
    jwt_https,
    jwt_lifetime,
    jwt_present,
    lb_tls_policy,
    management_port,
    network_policy,
    nlb_passthrough,
    open_cidrs,
    plain_http,
    priority_claims,
    privilege,
    probes,
    prompt_cache_isolation,
    rate_limits,
    read_only_root,
    redis_password,
    redis_tls,
    replicas,
    run_as_non_root,
    seccomp,
    spread,
    tenant_isolation,
    tier_auth_withheld,
    tier_identity_match,
    tier_token_to_pods,
    tls_secrets,
    tls_termination,
)
from igw.checks.framework import Check
from igw.checks.model import Command
from igw.checks.preflight import (
    addon_version,
    cert_manager,
    client_priority,
    config_valid,
    dependency_addons,
    eks_auth_mode,
    engine_priority,
    engine_type,
    gateway_role,
    gie_crds,
    igwc_crd,
    igwc_status,
    instance_quotas,
    jwks_probe,
    lb_controller,
    live_signals,
    model_server_version,
    pinned_versions,
    sdk_retry_after,
    selector_matches,
    subnet_tags,
    target_port,
)

PREFLIGHT: Final[tuple[Check, ...]] = (
    eks_auth_mode.CHECK,
    addon_version.CHECK,
    dependency_addons.CHECK,
    pinned_versions.CHECK,
    instance_quotas.CHECK,
    gateway_role.CHECK,
    subnet_tags.CHECK,
    igwc_crd.CHECK,
    gie_crds.CHECK,
    igwc_status.CHECK,
    lb_controller.CHECK,
    cert_manager.CHECK,
    config_valid.CHECK,
    selector_matches.CHECK,
    model_server_version.CHECK,
    engine_type.CHECK,
    engine_priority.CHECK,
    client_priority.CHECK,
    sdk_retry_after.CHECK,
    target_port.CHECK,
    live_signals.CHECK,
    jwks_probe.CHECK,
)

AUDIT: Final[tuple[Check, ...]] = (
    tls_termination.CHECK,
    lb_tls_policy.CHECK,
    certificates.CHECK,
    certificate_names.CHECK,
    tls_secrets.CHECK,
    jwt_present.CHECK,
    jwt_https.CHECK,
    jwt_audience.CHECK,
    jwks_host.CHECK,
    jwt_hardening.CHECK,
    jwt_lifetime.CHECK,
    tier_auth_withheld.CHECK,
    tier_token_to_pods.CHECK,
    tier_identity_match.CHECK,
    internet_facing.CHECK,
    open_cidrs.CHECK,
    plain_http.CHECK,
    drop_invalid_headers.CHECK,
    nlb_passthrough.CHECK,
    management_port.CHECK,
    global_router_https.CHECK,
    redis_password.CHECK,
    redis_tls.CHECK,
    run_as_non_root.CHECK,
    read_only_root.CHECK,
    capabilities.CHECK,
    seccomp.CHECK,
    privilege.CHECK,
    network_policy.CHECK,
    disruption_budget.CHECK,
    replicas.CHECK,
    probes.CHECK,
    spread.CHECK,
    iam_wildcards.CHECK,
    iam_trust.CHECK,
    rate_limits.CHECK,
    tenant_isolation.CHECK,
    priority_claims.CHECK,
    prompt_cache_isolation.CHECK,
)


def checks_for(command: Command) -> tuple[Check, ...]:
    return PREFLIGHT if command is Command.PREFLIGHT else AUDIT


def select(
    command: Command, *, only: list[str] | None = None, skip: list[str] | None = None
) -> tuple[Check, ...]:
    """The command's checks filtered by ``--check``/``--skip-check`` IDs; ``ValueError`` on unknown IDs
    and on a selection that leaves no check: a run of no check reports nothing and exits 0, a CI gate
    that passes whatever the cluster holds. IDs match whatever their case (``igw-au102`` is
    ``IGW-AU102``: until session s42 it was refused as unknown, the right one lost in the list)."""
    checks = checks_for(command)
    known = {c.meta.id.upper(): c.meta.id for c in checks}

    def resolve(name: str) -> str:
        found = known.get(name.strip().upper())
        if found is None:
            raise ValueError(
                f"unknown check ID {name!r} for igw {command.value}; "
                f"known: {', '.join(sorted(known.values()))}"
            )
        return found

    wanted_ids = {resolve(wanted) for wanted in only or []}
    skipped_ids = {resolve(wanted) for wanted in skip or []}
    chosen = tuple(
        c for c in checks if (not only or c.meta.id in wanted_ids) and c.meta.id not in skipped_ids
    )
    if not chosen:
        raise ValueError("--check and --skip-check leave no check to run (every --check is skipped too)")
    return chosen
