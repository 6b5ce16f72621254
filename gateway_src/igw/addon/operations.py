"""``igw addon`` flows for OUR add-on (:data:`igw.addon.pins.IGW_ADDON_NAME`, the chart in
``addon/chart`` published as an EKS add-on): pre-checks, then the EKS call, then waiting for it to settle.

``create`` refuses to call the API until everything it can check locally or read-only passes:
configuration values valid (same schema EKS enforces), cluster present, the add-on not already there
(its status and health issues named, with ``update`` or ``delete`` to use instead), the version published
for the cluster's Kubernetes version in the region, each dependency add-on
installed, ACTIVE and at its minimum version; with a role, the chart's ``mode: gateway`` (in the
default operator mode no pod runs as the service account a role would be bound to: each
InferenceGatewayConfig's gateway runs as ``<name>-gateway`` in its own namespace and calls no AWS API),
the role present and trusting EKS Pod Identity (or, for IRSA, the cluster's OIDC provider for the
gateway's service account) and, for EKS Pod Identity, the ``eks-pod-identity-agent`` add-on ACTIVE
(without it the association is never served); the role is bound once, to the service account the
values name (:mod:`igw.addon.irsa_subject`). ``update``
keeps an IRSA role: ``UpdateAddon`` gets the add-on's current ``serviceAccountRoleArn`` again and new
configuration values keep ``serviceAccount.roleArn`` unless they set it; a new one they set is checked
like ``create``'s and sent as ``serviceAccountRoleArn`` too. ``update`` of an add-on installed in
``mode: gateway`` refuses values that leave ``mode`` out (they mean operator, and ``UpdateAddon``
replaces the values whole) and a switch to ``mode: operator`` while a role is bound. Waiting polls
``describe_addon`` with an injected clock and sleep (tests never sleep) and reports each status
change; an add-on that goes DEGRADED or *_FAILED ends the wait with its health issues. ``update``
waits on its update's ``DescribeUpdate`` first (a failed update can leave the add-on ACTIVE), with the
update's errors when it fails. ``delete`` waits until ``DescribeAddon`` no longer finds the add-on
(``DeleteAddon`` only starts the removal), with its health issues when it goes DELETE_FAILED.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeVar, get_args

import yaml
from botocore.exceptions import ClientError

from igw.addon import addon_version, configuration, irsa_subject, pins
from igw.addon.eks_api import THROTTLED, AddonApiError, EksAddonApi
from igw.errors import IgwToolingError

ConflictPolicy = Literal["OVERWRITE", "NONE", "PRESERVE"]
CreateConflictPolicy = Literal["OVERWRITE", "NONE"]
"""``CreateAddon`` refuses ``PRESERVE`` (InvalidParameterException: "Resolve conflicts option preserve is
not supported for operation CreateAddon"); it keeps fields changed in the cluster on update only."""
Identity = Literal["pod-identity", "irsa"]
SETTLED: Final = frozenset({"ACTIVE"})
FAILED: Final = frozenset({"CREATE_FAILED", "UPDATE_FAILED", "DELETE_FAILED", "DEGRADED"})
DELETE_FAILED: Final = "DELETE_FAILED"
DEFAULT_TIMEOUT_S: Final = 900.0
DEFAULT_POLL_S: Final = 10.0
ADDON: Final = pins.IGW_ADDON_NAME


class AddonOperationError(IgwToolingError, RuntimeError):
    """An ``igw addon`` operation could not be done; ``problems`` says why, one line each."""

    def __init__(self, summary: str, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join([summary, *(f"  - {p}" for p in problems)]))


class AddonInputError(AddonOperationError):
    """The operation was refused before any AWS call because its input is invalid (values, version,
    role for the chart's mode): the caller's mistake, a usage error (``igw addon`` exits 2 for it, as
    for every other command's bad input), not a failure of the cluster or of AWS (exit 1)."""


@dataclass(frozen=True, slots=True)
class AwsClients:
    """The boto3 clients the flows use; ``addons`` is the seam, ``eks``/``iam`` are plain clients."""

    addons: EksAddonApi
    eks: Any
    iam: Any


@dataclass(frozen=True, slots=True)
class Waiter:
    """How to wait: injected so tests run in virtual time."""

    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic
    poll_s: float = DEFAULT_POLL_S
    timeout_s: float = DEFAULT_TIMEOUT_S
    progress: Callable[[str], None] = field(default=lambda _line: None)


def _role_name(role_arn: str) -> str:
    return role_arn.rsplit("/", 1)[-1]


def preflight(
    *,
    clients: AwsClients,
    cluster: str,
    role_arn: str | None,
    identity: Identity = "pod-identity",
    version: str | None = None,
    service_account: str = pins.GATEWAY_SERVICE_ACCOUNT,
) -> list[str]:
    """Every reason the add-on (at ``version``, when given) cannot be installed on ``cluster`` now
    (empty when it can); ``service_account`` is the one the gateway runs as (the role's subject)."""
    try:
        described = clients.eks.describe_cluster(name=cluster)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
            return [f"cluster {cluster!r} does not exist"]
        raise
    problems: list[str] = []
    installed_ours = clients.addons.describe_addon(cluster=cluster, name=ADDON)
    if installed_ours is not None:
        problems.append(_already_installed(installed_ours, cluster))
    kubernetes = str(described["cluster"].get("version", ""))
    if version is not None and kubernetes:
        problems.extend(
            version_problems(clients=clients, cluster=cluster, kubernetes=kubernetes, version=version)
        )
    for dependency in pins.DEPENDENCY_ADDONS:
        installed = clients.addons.describe_addon(cluster=cluster, name=dependency.name)
        if installed is None:
            problems.append(
                f"dependency add-on {dependency.name} is not installed (needs >= "
                f"{dependency.minimum}; {dependency.why})"
            )
            continue
        version = str(installed.get("addonVersion", ""))
        try:
            recent_enough = addon_version.at_least(version, dependency.minimum)
        except addon_version.AddonVersionError:
            problems.append(f"dependency add-on {dependency.name} has an unreadable version {version!r}")
            continue
        if not recent_enough:
            problems.append(
                f"dependency add-on {dependency.name} is {version}, needs >= {dependency.minimum}"
            )
        if installed.get("status") != "ACTIVE":
            problems.append(f"dependency add-on {dependency.name} is {installed.get('status')}, not ACTIVE")
    if role_arn is None:
        return problems
    if identity == "pod-identity":
        agent = clients.addons.describe_addon(cluster=cluster, name=pins.POD_IDENTITY_AGENT_ADDON)
        if agent is None or agent.get("status") != "ACTIVE":
            state = "not installed" if agent is None else f"{agent.get('status')}, not ACTIVE"
            problems.append(
                f"{pins.POD_IDENTITY_AGENT_ADDON} is {state}: EKS Pod Identity associations need it "
                f"(install it, or use --identity irsa)"
            )
    try:
        role = clients.iam.get_role(RoleName=_role_name(role_arn))["Role"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "NoSuchEntity":
            raise
        problems.append(f"gateway IAM role {role_arn} does not exist (create it before the add-on)")
        return problems
    issuer = str(described["cluster"].get("identity", {}).get("oidc", {}).get("issuer", ""))
    problems.extend(
        trust_problems(role_arn, role.get("AssumeRolePolicyDocument"), identity, issuer, service_account)
    )
    return problems


def _listed(value: Any) -> list[str]:
    """A policy element that is one string or a list of them, as a list."""
    return [value] if isinstance(value, str) else [str(item) for item in value or []]


def _allows(statement: Mapping[str, Any], action: str) -> bool:
    return any(a in (action, "sts:*", "*") for a in _listed(statement.get("Action")))


def trust_problems(
    role_arn: str,
    document: Any,
    identity: Identity,
    oidc_issuer: str,
    service_account: str = pins.GATEWAY_SERVICE_ACCOUNT,
) -> list[str]:
    """Why the role's trust policy would not let the gateway's pods assume it (empty when it would).

    EKS Pod Identity needs an Allow for the service principal ``pods.eks.amazonaws.com`` with
    ``sts:AssumeRole`` and ``sts:TagSession``; IRSA an Allow for the cluster's OIDC provider
    (``Federated: arn:...:oidc-provider/<issuer>``) with ``sts:AssumeRoleWithWebIdentity``. A role
    without it passed the pre-check (it only had to exist), the add-on went ACTIVE, and the gateway's
    AWS calls failed at run time with AccessDenied. For IRSA the statement's ``<provider>:sub``
    condition, when it has one, must admit ``service_account`` (:mod:`igw.addon.irsa_subject`).
    ``document`` is the decoded policy (botocore decodes IAM's URL-encoded JSON)."""
    statements = document.get("Statement", []) if isinstance(document, Mapping) else []
    allowed = [
        st
        for st in ([statements] if isinstance(statements, Mapping) else statements)
        if isinstance(st, Mapping)
        and st.get("Effect") == "Allow"
        and isinstance(st.get("Principal"), Mapping)
    ]
    if identity == "pod-identity":
        pods = [st for st in allowed if "pods.eks.amazonaws.com" in _listed(st["Principal"].get("Service"))]
        missing = [a for a in ("sts:AssumeRole", "sts:TagSession") if not any(_allows(st, a) for st in pods)]
        if not missing:
            return []
        return [
            f"gateway IAM role {role_arn} does not let EKS Pod Identity assume it: its trust policy needs "
            f"an Allow for the service pods.eks.amazonaws.com with {' and '.join(missing)}"
        ]
    provider = oidc_issuer.removeprefix("https://")
    federated = [
        st
        for st in allowed
        if provider
        and any(p.endswith(f":oidc-provider/{provider}") for p in _listed(st["Principal"].get("Federated")))
    ]
    assumable = [st for st in federated if _allows(st, "sts:AssumeRoleWithWebIdentity")]
    refused = [irsa_subject.subjects_refused(st, provider, service_account) for st in assumable]
    if any(not subjects for subjects in refused):
        return []
    if assumable:
        named = ", ".join(sorted({s for subjects in refused for s in subjects}))
        return [
            f"gateway IAM role {role_arn} lets only other service accounts assume it (IRSA): its trust "
            f"policy's {provider}:sub condition names {named}, and the gateway runs as service account "
            f"{service_account} (in the add-on's namespace, {pins.ADDON_NAMESPACE} by default)"
        ]
    return [
        f"gateway IAM role {role_arn} does not let the cluster's service accounts assume it (IRSA): its "
        f"trust policy needs an Allow for the OIDC provider {provider or '(the cluster has no OIDC issuer)'} "
        f"with sts:AssumeRoleWithWebIdentity"
    ]


def version_problems(*, clients: AwsClients, cluster: str, kubernetes: str, version: str) -> list[str]:
    """Why ``version`` of the add-on cannot go on ``cluster`` (Kubernetes ``kubernetes``): not published
    for that Kubernetes version in this region (``DescribeAddonVersions``, every page), naming what is.

    ``CreateAddon``/``UpdateAddon`` refuse such a version themselves (InvalidParameterException), but
    only after every other pre-check, and without saying which versions would do or that the add-on
    is not offered in the region at all."""
    published = clients.addons.addon_versions(name=ADDON, kubernetes_version=kubernetes)
    names = [str(item.get("addonVersion")) for item in sorted_versions(published)]
    if version in names:
        return []
    region = clients.addons.region
    if not names:
        return [
            f"{ADDON} has no version published for Kubernetes {kubernetes} (cluster {cluster}) in {region}"
        ]
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} older" if len(names) > 5 else "")
    return [
        f"{ADDON} {version} is not published for Kubernetes {kubernetes} (cluster {cluster}) in {region}; "
        f"published: {shown} (igw addon versions --kubernetes-version {kubernetes})"
    ]


def _already_installed(addon: Mapping[str, Any], cluster: str) -> str:
    """Why ``create`` stops for an add-on already on ``cluster``, and what to do instead: ``CreateAddon``
    refuses it anyway (ResourceInUseException "Addon already exists."), but only after the other
    pre-checks, and without saying that a CREATE_FAILED or DEGRADED one (its health issues shown) is
    fixed with ``update`` or removed with ``delete`` first."""
    status = str(addon.get("status"))
    line = f"{ADDON} is already installed on {cluster} ({addon.get('addonVersion', '?')}, {status})"
    if status in FAILED:
        issues = "; ".join(health_lines(addon)) or "EKS reported no health issue"
        return f"{line}: {issues}; fix it with igw addon update, or igw addon delete it and create again"
    if status == "DELETING":
        return f"{line}: create again once it is gone"
    return f"{line}: change it with igw addon update"


def _values_and_version_problems(values: Mapping[str, Any] | None, version: str | None) -> list[str]:
    problems = (
        [
            f"configurationValues.{p}"
            for p in (*configuration.problems(values), *configuration.operator_mode_problems(values))
        ]
        if values is not None
        else []
    )
    if values is not None and not problems:
        problems = [f"configurationValues: {p}" for p in configuration.render_problems(values)]
    if version is not None:
        try:
            addon_version.AddonVersion.parse(version)
        except addon_version.AddonVersionError as exc:
            problems.append(f"version: {exc}")
    return problems


def create_input_problems(
    *,
    values: Mapping[str, Any],
    version: str,
    role_arn: str | None,
    identity: Identity = "pod-identity",
) -> list[str]:
    """Every reason :func:`create`'s input is invalid, found without AWS (no client, region or
    credentials needed: ``igw addon`` reports them before it makes its clients)."""
    problems = _values_and_version_problems(values, version)
    if identity == "irsa" and role_arn is None and not _values_role(values):
        problems.append(
            "role: --identity irsa binds an IAM role to the gateway's service account, and none is given: "
            "pass --role-arn ARN (or set serviceAccount.roleArn in the configuration values)"
        )
        return problems
    role_arn = bound_role(values, role_arn, identity)
    if role_arn is not None and values.get("mode", "operator") != "gateway":
        problems.append(
            f"role: with the chart's mode operator no pod runs as service account "
            f"{pins.GATEWAY_SERVICE_ACCOUNT} (each InferenceGatewayConfig's gateway runs as "
            f"<name>-gateway in its own namespace and calls no AWS API); omit --role-arn, or set "
            f"mode: gateway in the values"
        )
    elif role_arn is not None:
        problems.extend(_role_binding_problems(values, role_arn, identity))
    return problems


def bound_role(values: Mapping[str, Any], role_arn: str | None, identity: Identity) -> str | None:
    """The role :func:`create` binds: ``--role-arn``, or with ``--identity irsa`` and no ``--role-arn``
    the values' ``serviceAccount.roleArn``, checked and sent as ``serviceAccountRoleArn`` like one
    given by flag (as ``update`` does with a role new values set). Before session s39 ``--identity
    irsa`` without ``--role-arn`` went on to the AWS calls: an IRSA role in the values was installed
    unchecked, and with none the gateway ran without the role the flag asked for."""
    if role_arn is None and identity == "irsa":
        return _values_role(values) or None
    return role_arn


def _values_role(values: Mapping[str, Any]) -> str:
    """The IRSA role ``serviceAccount.roleArn`` in ``values`` (``""`` when none)."""
    account = values.get("serviceAccount")
    return str(account.get("roleArn") or "") if isinstance(account, Mapping) else ""


def _role_binding_problems(values: Mapping[str, Any], role_arn: str, identity: Identity) -> list[str]:
    """Why ``--role-arn`` would not be the role the gateway gets with these values.

    A Pod Identity association names a service account, and the values may rename the chart's
    (``serviceAccount.name``): the association was made for ``inference-gateway`` while the pods ran
    as another, without credentials. An IRSA role in the values beside a Pod Identity role won over it
    (AWS SDKs try the web-identity token before the Pod Identity endpoint), and with ``--identity irsa``
    the values' role was replaced by ``--role-arn`` without a word."""
    problems = []
    if irsa_subject.gateway_service_account(values) is None:
        problems.append(
            "serviceAccount.name: empty, so the chart names the gateway's service account after the Helm "
            "release EKS chooses; a role is bound to a service account by name: give one (or omit it "
            f"for {pins.GATEWAY_SERVICE_ACCOUNT})"
        )
    given = _values_role(values)
    if given and identity == "pod-identity":
        problems.append(
            f"serviceAccount.roleArn: an IRSA role ({given}) beside --role-arn's Pod Identity association "
            "would be the one the gateway uses (AWS SDKs try the web-identity token first); remove it "
            "from the values, or use --identity irsa"
        )
    elif given and given != role_arn:
        problems.append(
            f"serviceAccount.roleArn: {given} differs from --role-arn {role_arn}; give the role once"
        )
    return problems


def update_input_problems(*, values: Mapping[str, Any] | None, version: str | None) -> list[str]:
    """Every reason :func:`update`'s input is invalid, found without AWS."""
    return _values_and_version_problems(values, version)


def create(
    *,
    clients: AwsClients,
    cluster: str,
    role_arn: str | None,
    values: Mapping[str, Any],
    version: str = pins.IGW_ADDON_VERSION,
    identity: Identity = "pod-identity",
    resolve_conflicts: CreateConflictPolicy = "OVERWRITE",
    wait: Waiter | None = None,
) -> dict[str, Any]:
    """Install the add-on; returns its final description (or the creation response without ``wait``)."""
    problems = create_input_problems(values=values, version=version, role_arn=role_arn, identity=identity)
    role_arn = bound_role(values, role_arn, identity)
    if resolve_conflicts not in get_args(CreateConflictPolicy):
        problems.append(
            f"resolve conflicts: {resolve_conflicts} is not supported by CreateAddon (update only)"
        )
    if problems:
        raise AddonInputError("refusing to create the add-on: invalid input", problems)
    account = irsa_subject.gateway_service_account(values) or pins.GATEWAY_SERVICE_ACCOUNT
    problems = preflight(
        clients=clients,
        cluster=cluster,
        role_arn=role_arn,
        identity=identity,
        version=version,
        service_account=account,
    )
    if problems:
        raise AddonOperationError(f"refusing to create the add-on on {cluster}: pre-checks failed", problems)
    final_values = dict(values)
    pod_identity: list[dict[str, str]] = []
    if role_arn is not None and identity == "irsa":
        final_values["serviceAccount"] = {**dict(values.get("serviceAccount", {})), "roleArn": role_arn}
    elif role_arn is not None:
        pod_identity = [{"serviceAccount": account, "roleArn": role_arn}]
    try:
        created = clients.addons.create_addon(
            cluster=cluster,
            name=ADDON,
            version=version,
            configuration_values=configuration.validated(final_values),
            resolve_conflicts=resolve_conflicts,
            pod_identity=pod_identity,
            service_account_role_arn=role_arn if identity == "irsa" else None,
        )
    except AddonApiError as exc:
        if exc.code != "ResourceInUseException":
            raise
        raise AddonOperationError(
            f"{ADDON} could not be created on {cluster}: {exc}", [_IN_USE_HINT.format(cluster=cluster)]
        ) from exc
    if wait is None:
        return created
    return wait_until_settled(clients=clients, cluster=cluster, waiter=wait)


_IN_USE_HINT: Final = (
    "the add-on was installed on {cluster} after the pre-checks read it absent (another igw addon create, "
    "the CDK app, the console): see it with aws eks describe-addon, change it with igw addon update"
)
"""What ``create`` says when ``CreateAddon`` answers ResourceInUseException ("Addon already exists.")
though its pre-check found no add-on: a concurrent install. Before session s48 the bare API error was
printed, with no word of ``update``."""


def update(
    *,
    clients: AwsClients,
    cluster: str,
    values: Mapping[str, Any] | None,
    version: str | None,
    resolve_conflicts: ConflictPolicy = "OVERWRITE",
    wait: Waiter | None = None,
) -> dict[str, Any]:
    """Change the add-on's version and/or configuration values (validated first)."""
    problems = update_input_problems(values=values, version=version)
    if problems:
        raise AddonInputError("refusing to update the add-on: invalid input", problems)
    current = clients.addons.describe_addon(cluster=cluster, name=ADDON)
    if current is None:
        raise AddonOperationError("cannot update", [_not_installed(clients, cluster)])
    if version is not None and version != current.get("addonVersion"):
        kubernetes = str(clients.eks.describe_cluster(name=cluster)["cluster"].get("version", ""))
        problems = (
            version_problems(clients=clients, cluster=cluster, kubernetes=kubernetes, version=version)
            if kubernetes
            else []
        )
        if problems:
            raise AddonOperationError(
                f"refusing to update the add-on on {cluster}: pre-checks failed", problems
            )
    problems = _mode_switch_problems(values, current) if values is not None else []
    if problems:
        raise AddonOperationError(f"refusing to update the add-on on {cluster}", problems)
    irsa_role = str(current.get("serviceAccountRoleArn") or "")
    new_values = _keep_irsa_role(values, current) if values is not None else None
    wanted = _values_role(new_values) if new_values is not None else ""
    if wanted and new_values is not None and wanted != irsa_role:
        problems = _new_irsa_role_problems(clients, cluster, current, wanted, new_values)
        if problems:
            raise AddonOperationError(
                f"refusing to update the add-on on {cluster}: pre-checks failed", problems
            )
        irsa_role = wanted
    update_info = clients.addons.update_addon(
        cluster=cluster,
        name=ADDON,
        version=version,
        configuration_values=configuration.validated(new_values) if new_values is not None else None,
        resolve_conflicts=resolve_conflicts,
        service_account_role_arn=str(irsa_role) if irsa_role else None,
    )
    if wait is None:
        return update_info
    return wait_for_update(clients=clients, cluster=cluster, update_id=str(update_info["id"]), waiter=wait)


def _new_irsa_role_problems(
    clients: AwsClients, cluster: str, current: Mapping[str, Any], role_arn: str, values: Mapping[str, Any]
) -> list[str]:
    """Why the IRSA role new values name (``serviceAccount.roleArn``, not the installed one) cannot be
    the gateway's: an add-on bound by Pod Identity, a role that does not exist or does not trust the
    cluster's OIDC provider for the gateway's service account.

    Why: ``update`` sent the installed ``serviceAccountRoleArn`` beside the new values' role, so the
    service account was annotated with two roles, and the new one was checked nowhere."""
    if current.get("podIdentityAssociations"):
        return [
            f"serviceAccount.roleArn: the add-on's gateway is bound by EKS Pod Identity; an IRSA role "
            f"({role_arn}) would win over that association (AWS SDKs try the web-identity token first): "
            "keep one binding (igw addon delete and create again to change it)"
        ]
    try:
        role = clients.iam.get_role(RoleName=_role_name(role_arn))["Role"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "NoSuchEntity":
            raise
        return [f"gateway IAM role {role_arn} does not exist (create it before the update)"]
    described = clients.eks.describe_cluster(name=cluster)["cluster"]
    issuer = str(described.get("identity", {}).get("oidc", {}).get("issuer", ""))
    account = irsa_subject.gateway_service_account(values) or pins.GATEWAY_SERVICE_ACCOUNT
    return trust_problems(role_arn, role.get("AssumeRolePolicyDocument"), "irsa", issuer, account)


def _not_installed(clients: AwsClients, cluster: str) -> str:
    """Why ``DescribeAddon`` found no add-on: EKS answers ResourceNotFoundException for a cluster that
    does not exist (a misspelt name, another region) as for a missing add-on, and "not installed on
    nope" sent the operator to ``create``, on a cluster that is not there."""
    try:
        clients.eks.describe_cluster(name=cluster)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
            return f"cluster {cluster!r} does not exist in {clients.addons.region}"
        raise
    return f"{ADDON} is not installed on {cluster}"


def _installed_values(current: Mapping[str, Any]) -> Mapping[str, Any]:
    """The installed add-on's configuration values (EKS keeps the string as given: JSON or YAML); empty
    when there are none or they do not read as a mapping."""
    try:
        installed = yaml.safe_load(str(current.get("configurationValues") or "{}"))
    except yaml.YAMLError:
        return {}
    return installed if isinstance(installed, Mapping) else {}


def _mode_switch_problems(values: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Why new values would turn an add-on installed in ``mode: gateway`` into ``mode: operator`` by
    mistake, or into one whose IAM role binding no pod can use.

    Why: ``UpdateAddon`` replaces the configuration values whole, and ``mode`` defaults to operator, so
    values that leave ``mode`` out (``{"gateway": {"workers": 4}}``) switched a gateway-mode add-on to
    operator mode: EKS deleted its gateway Deployment and load balancer Service (the endpoint gone) and
    nothing said so. And a switch to operator mode carried the installed IRSA role into the new values
    (``serviceAccount.roleArn``) and ``serviceAccountRoleArn``, where ``create`` refuses a role."""
    installed = _installed_values(current)
    if installed.get("mode") != "gateway" or values.get("mode", "operator") != "operator":
        return []
    if "mode" not in values:
        return [
            "configurationValues.mode: the installed add-on runs mode gateway and these values leave mode "
            "out, which means operator: the update would delete its gateway Deployment and load balancer "
            "Service (UpdateAddon replaces the values whole); set mode: gateway to keep it, or mode: "
            "operator to switch"
        ]
    bindings = [
        *([f"IRSA role {current['serviceAccountRoleArn']}"] if current.get("serviceAccountRoleArn") else []),
        *(f"Pod Identity association {item}" for item in current.get("podIdentityAssociations") or []),
    ]
    return [
        f"role: the installed add-on binds {binding} to its gateway's service account, and with the "
        f"chart's mode operator no pod runs as {pins.GATEWAY_SERVICE_ACCOUNT} (each "
        "InferenceGatewayConfig's gateway runs as <name>-gateway in its own namespace and calls no AWS "
        "API); igw addon delete it and create it again in mode operator without --role-arn"
        for binding in bindings
    ]


def _keep_irsa_role(values: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """New values with the installed ``serviceAccount.roleArn`` unless they set one themselves."""
    out = dict(values)
    try:
        installed = json.loads(str(current.get("configurationValues") or "{}"))
    except ValueError:
        return out
    role = (installed.get("serviceAccount") or {}).get("roleArn") if isinstance(installed, dict) else None
    account = dict(out.get("serviceAccount") or {})
    if role and not account.get("roleArn"):
        out["serviceAccount"] = {**account, "roleArn": role}
    return out


def crd_removal_risks(current: Mapping[str, Any]) -> list[str]:
    """Why deleting the installed add-on without ``preserve`` may delete every InferenceGatewayConfig
    (empty when its values install no CRD).

    Why: without ``preserve`` EKS removes every resource of the chart, the InferenceGatewayConfig CRD
    among them. The chart marks it ``helm.sh/resource-policy: keep`` (``crds.keep``), but whether EKS's
    removal honours Helm's annotation is not documented and cannot be tested here; where it does not,
    the API server deletes every InferenceGatewayConfig with its CRD, and garbage collection each
    one's gateway Deployment and load balancer Service. ``igw addon delete`` did that with no word."""
    installed = _installed_values(current)
    section = installed.get("crds")
    crds: Mapping[str, Any] = section if isinstance(section, Mapping) else {}
    if crds.get("enabled") is False:
        return []
    keep = (
        "the chart does not keep the CRD (crds.keep: false)"
        if crds.get("keep") is False
        else "the chart marks the CRD helm.sh/resource-policy: keep, which EKS is not documented to honour"
    )
    gateways = (
        "and with each one its gateway Deployment and load balancer Service (the endpoint gone)"
        if installed.get("mode", "operator") == "operator"
        else "(the objects; mode gateway serves from its own ConfigMap)"
    )
    return [
        f"without --preserve EKS removes the add-on's Kubernetes resources, the InferenceGatewayConfig CRD "
        f"among them: {keep}; deleting the CRD deletes every InferenceGatewayConfig in the cluster "
        f"{gateways} (list them: kubectl get igwc -A)",
        "keep them with igw addon delete --preserve (the resources stay, no longer managed by EKS), or "
        "delete the InferenceGatewayConfigs you mean to remove first; pass --allow-config-deletion to "
        "delete the add-on anyway",
    ]


def delete(
    *,
    clients: AwsClients,
    cluster: str,
    preserve: bool,
    wait: Waiter | None = None,
    allow_config_deletion: bool = False,
) -> dict[str, Any]:
    """Remove the add-on; ``preserve`` keeps its Kubernetes resources running. Returns the add-on as
    ``DeleteAddon`` answered it (``DELETING``), after waiting until it is gone when ``wait`` is given.
    Without ``preserve`` it refuses, before ``DeleteAddon``, an add-on whose values install the
    InferenceGatewayConfig CRD unless ``allow_config_deletion`` (:func:`crd_removal_risks`).

    Why wait: ``DeleteAddon`` only starts the removal. Returning at once (exit 0) let
    ``igw addon delete && igw addon create`` fail on an add-on still DELETING, and a removal that
    ended DELETE_FAILED went unreported."""
    current = clients.addons.describe_addon(cluster=cluster, name=ADDON)
    if current is None:
        raise AddonOperationError("cannot delete", [_not_installed(clients, cluster)])
    if not preserve and not allow_config_deletion and (risks := crd_removal_risks(current)):
        raise AddonOperationError(
            f"refusing to delete {ADDON} from {cluster}: it may delete every InferenceGatewayConfig", risks
        )
    deleting = clients.addons.delete_addon(cluster=cluster, name=ADDON, preserve=preserve)
    if wait is not None:
        wait_until_deleted(clients=clients, cluster=cluster, waiter=wait)
    return deleting


def health_lines(addon: Mapping[str, Any]) -> list[str]:
    """The add-on's health issues, one line each (``code: message [resources]``)."""
    lines = []
    for issue in addon.get("health", {}).get("issues", []):
        resources = ", ".join(issue.get("resourceIds", []))
        suffix = f" [{resources}]" if resources else ""
        lines.append(f"{issue.get('code', '?')}: {issue.get('message', '')}{suffix}")
    return lines


TRANSIENT_CODES: Final = THROTTLED
"""Errors a poll can meet that say nothing about the add-on: throttling and EKS's 5xx ``ServerException``.
botocore already retried the call (its ``standard`` mode: 3 attempts with jittered backoff)."""

_T = TypeVar("_T")


def _poll(call: Callable[[], _T], *, waiter: Waiter, deadline: float, waiting_for: str) -> _T | None:
    """``call()``, or ``None`` after one of :data:`TRANSIENT_CODES` (said through ``waiter.progress``;
    the caller polls again after ``poll_s``), or the timeout error once ``deadline`` has passed.

    Why: a wait polls for up to ``--timeout`` (900 s), and a throttled ``DescribeAddon`` that outlasted
    botocore's retries ended it with exit 1 while the add-on went on installing; a re-run then met it
    as already installed."""
    try:
        return call()
    except AddonApiError as exc:
        if exc.code not in TRANSIENT_CODES:
            raise
        if waiter.monotonic() >= deadline:
            # the same hint as when the error ends a command (wait, or retry longer): the timeout said
            # only "last error: ... ThrottlingException", not what to do about it
            problems = [f"last error: {exc}", *([exc.hint] if exc.hint else [])]
            raise AddonOperationError(
                f"timed out after {waiter.timeout_s:.0f} s waiting for {waiting_for}", problems
            ) from exc
        waiter.progress(f"{exc} (polling again)")
        waiter.sleep(waiter.poll_s)
        return None


def _descriptions(
    *, clients: AwsClients, cluster: str, waiter: Waiter, deadline: float, waiting_for: str
) -> Iterator[dict[str, Any] | None]:
    """The add-on's description at each poll (``None`` once it is gone), every ``poll_s`` until the
    caller stops, each status change reported through ``waiter.progress``; the timeout error once
    ``deadline`` has passed without the caller stopping."""
    last_status = None
    while True:
        polled = _poll(  # in a tuple: describe_addon's own None (the add-on gone) is not a missed poll
            lambda: (clients.addons.describe_addon(cluster=cluster, name=ADDON),),
            waiter=waiter,
            deadline=deadline,
            waiting_for=waiting_for,
        )
        if polled is None:
            continue
        addon = polled[0]
        status = None if addon is None else str(addon.get("status"))
        if addon is not None and status != last_status:
            waiter.progress(f"{ADDON} {addon.get('addonVersion', '')}: {status}")
            last_status = status
        yield addon
        if waiter.monotonic() >= deadline:
            raise AddonOperationError(
                f"timed out after {waiter.timeout_s:.0f} s waiting for {waiting_for}",
                [f"last status: {last_status}"],
            )
        waiter.sleep(waiter.poll_s)


def wait_until_settled(
    *, clients: AwsClients, cluster: str, waiter: Waiter, deadline: float | None = None
) -> dict[str, Any]:
    """Poll until ACTIVE; raise with the health issues on DEGRADED/*_FAILED, or on timeout
    (``waiter.timeout_s`` from now, or at ``deadline`` when a longer wait already started)."""
    if deadline is None:
        deadline = waiter.monotonic() + waiter.timeout_s
    for addon in _descriptions(
        clients=clients, cluster=cluster, waiter=waiter, deadline=deadline, waiting_for="ACTIVE"
    ):
        if addon is None:
            raise AddonOperationError("the add-on disappeared while waiting", [f"{ADDON} on {cluster}"])
        status = str(addon.get("status"))
        if status in SETTLED:
            return addon
        if status in FAILED:
            raise AddonOperationError(
                f"{ADDON} is {status}", health_lines(addon) or ["EKS reported no health issue"]
            )
    raise AssertionError("unreachable: _descriptions polls until stopped or timed out")


def wait_until_deleted(*, clients: AwsClients, cluster: str, waiter: Waiter) -> None:
    """Poll ``describe_addon`` until the add-on is gone; raise with its health issues when it goes
    ``DELETE_FAILED``, or after ``waiter.timeout_s``. Only DELETE_FAILED ends it: right after
    ``DeleteAddon`` the add-on can still read ACTIVE or DEGRADED (the state being removed)."""
    deadline = waiter.monotonic() + waiter.timeout_s
    for addon in _descriptions(
        clients=clients, cluster=cluster, waiter=waiter, deadline=deadline, waiting_for="the deletion"
    ):
        if addon is None:
            waiter.progress(f"{ADDON}: deleted")
            return
        status = str(addon.get("status"))
        if status == DELETE_FAILED:
            raise AddonOperationError(
                f"{ADDON} is {status}", health_lines(addon) or ["EKS reported no health issue"]
            )


UPDATE_DONE: Final = "Successful"
UPDATE_FAILED: Final = frozenset({"Failed", "Cancelled"})


def update_error_lines(update: Mapping[str, Any]) -> list[str]:
    """The update's errors, one line each (``code: message [resources]``)."""
    lines = []
    for error in update.get("errors", []):
        resources = ", ".join(error.get("resourceIds", []))
        suffix = f" [{resources}]" if resources else ""
        lines.append(f"{error.get('errorCode', '?')}: {error.get('errorMessage', '')}{suffix}")
    return lines


def wait_for_update(*, clients: AwsClients, cluster: str, update_id: str, waiter: Waiter) -> dict[str, Any]:
    """Poll ``DescribeUpdate`` for ``update_id`` until it is ``Successful``, then wait for the add-on to
    be ACTIVE (:func:`wait_until_settled`, within the same timeout); raise with the update's errors when
    it is ``Failed`` or ``Cancelled``, or on timeout.

    Why not the add-on's status alone: an update EKS refuses (``ConfigurationConflict`` under
    ``--resolve-conflicts NONE``) leaves the add-on ACTIVE at its old version and configuration, and
    right after ``UpdateAddon`` the add-on can still read ACTIVE (or DEGRADED, the state being fixed)
    before EKS moves it to UPDATING: waiting on the add-on reported such an update as done, exit 0.
    """
    deadline = waiter.monotonic() + waiter.timeout_s
    last_status = None
    while True:
        update = _poll(
            lambda: clients.addons.describe_update(cluster=cluster, name=ADDON, update_id=update_id),
            waiter=waiter,
            deadline=deadline,
            waiting_for=f"update {update_id}",
        )
        if update is None:
            continue
        status = str(update.get("status"))
        if status != last_status:
            waiter.progress(f"{ADDON} update {update_id}: {status}")
            last_status = status
        if status == UPDATE_DONE:
            return wait_until_settled(clients=clients, cluster=cluster, waiter=waiter, deadline=deadline)
        if status in UPDATE_FAILED:
            raise AddonOperationError(
                f"update {update_id} of {ADDON} on {cluster} is {status}",
                update_error_lines(update) or ["EKS reported no error for it"],
            )
        if waiter.monotonic() >= deadline:
            raise AddonOperationError(
                f"timed out after {waiter.timeout_s:.0f} s waiting for update {update_id}",
                [f"last status: {status}"],
            )
        waiter.sleep(waiter.poll_s)


def sorted_versions(versions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Newest first; unreadable versions last (never silently dropped)."""

    def key(item: Mapping[str, Any]) -> tuple[int, addon_version.AddonVersion]:
        try:
            return (1, addon_version.AddonVersion.parse(str(item.get("addonVersion", ""))))
        except addon_version.AddonVersionError:
            return (0, addon_version.AddonVersion(0, 0, 0))

    return sorted(versions, key=key, reverse=True)
