"""Source, AWS side of a live scan - the ONE seam through which checks touch AWS APIs.

:class:`AwsAccount` holds boto3 clients (``eks``, ``iam``, ``ec2``, ``elbv2``); tests hand it moto-backed
clients for IAM/EC2/ELBv2 and a ``botocore.stub.Stubber``-wrapped EKS client (moto has no add-on
APIs). Every fact is read independently: ``AccessDenied`` on one call makes that fact ``Missing``
(not-evaluated, naming the API call), never the whole scan. Two failures are said once, not per fact:
credentials AWS rejects (expired, unknown) end the AWS reads, every AWS fact ``Missing`` for that one
reason; a throttle that outlasted botocore's retries gets one hint. Both become ``AwsView.problems``,
the run's source problems. A missing region, an unknown profile or no credentials at all are found
before any read by :meth:`AwsAccount.check_setup` (a usage error).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar
from urllib.parse import unquote

from igw.addon import pins
from igw.checks.inventory import (
    Addon,
    AwsView,
    EksCluster,
    IamRole,
    InstanceQuota,
    Listener,
    LoadBalancer,
    Missing,
    Subnet,
)
from igw.checks.model import SkipKind
from igw.errors import IgwToolingError
from igw.redaction import redact_value

T = TypeVar("T")
SERVICES = ("eks", "iam", "ec2", "elbv2", "sagemaker", "service-quotas")
QUOTA_SERVICE_CODE = "sagemaker"
QUOTA_NAME = "{instance_type} for cluster usage"
"""How Service Quotas names the HyperPod (cluster usage) quota of an instance type."""


class AwsSetupError(IgwToolingError, ValueError):
    """No AWS read can work (no region, an unknown profile, no credentials): a usage error naming the
    cause and the fix, said once before any check instead of once per AWS fact."""


class AwsAccount:
    def __init__(
        self,
        *,
        clients: Mapping[str, Any] | None = None,
        region: str | None = None,
        profile: str | None = None,
    ) -> None:
        self._clients = dict(clients or {})
        self._injected = clients is not None
        self._region = region
        self._profile = profile
        self._session: Any = None

    def provides(self, service: str) -> bool:
        """Whether ``service`` can be asked: always with a real session; with injected clients (tests)
        only those injected, so a test never reaches a real endpoint. (Keyed on clients injected, not on
        clients held: a real session holding its first client said no to the rest, and IGW-PF031 was
        skipped as "clients not given" on every live scan.)"""
        return not self._injected or service in self._clients

    def _boto_session(self) -> Any:
        if self._session is None:
            # deferred: optional dependency: boto3 (ops extra), only for reads from a live AWS account
            import boto3

            self._session = boto3.Session(region_name=self._region, profile_name=self._profile)
        return self._session

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self._boto_session().client(service)
        return self._clients[service]

    def check_setup(self) -> None:
        """Raise :class:`AwsSetupError` when no AWS read can work: an unknown profile, no region, no
        credentials (or a credential source that fails, such as an expired SSO token). Injected clients
        (tests) are taken as they are. Why: each AWS fact failed on its own, the same error once per
        check ("eks:DescribeCluster hp: NoRegionError: You must specify a region." five times)."""
        if self._injected:
            return
        # deferred: optional dependency: boto3 (ops extra), only for reads from a live AWS account
        from botocore.exceptions import BotoCoreError, ProfileNotFound

        named = f"--profile {self._profile}" if self._profile else "AWS_PROFILE"
        try:
            session = self._boto_session()
        except ProfileNotFound as exc:
            raise AwsSetupError(
                f"{named}: {exc}: name a profile of the AWS config (aws configure list-profiles)"
            ) from exc
        if not session.region_name:
            # boto3 reads AWS_DEFAULT_REGION (or the profile's region), not AWS_REGION
            raise AwsSetupError("no AWS region for --cluster-name: pass --region or set AWS_DEFAULT_REGION")
        try:
            credentials = session.get_credentials()
        except BotoCoreError as exc:
            raise AwsSetupError(
                f"AWS credentials: {redact_value(str(exc))}: refresh them (aws sso login, "
                "or a new session token)"
            ) from exc
        if credentials is None:
            raise AwsSetupError(
                "no AWS credentials found: pass --profile, set AWS_PROFILE, or run aws configure "
                "or aws sso login"
            )


class _Reads:
    """Runs the AWS reads of one scan; remembers what is said once rather than per fact."""

    def __init__(self) -> None:
        self.rejected: Missing | None = None
        self.throttled = False
        self.problems: list[str] = []

    def attempt(self, what: str, call: Callable[[], T]) -> T | Missing:
        """Run one AWS read; turn credential/permission/network failures into a not-evaluated Missing.
        After AWS has rejected the credentials no further read is tried: each would fail alike."""
        # deferred: optional dependency: boto3 (ops extra), only for reads from a live AWS account
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        from igw.addon.eks_api import EXPIRED, REJECTED, THROTTLED, error_hint

        if self.rejected is not None:
            return self.rejected
        try:
            return call()
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", "Error"))
            message = redact_value(str(error.get("Message", exc)))
            missing = Missing(f"{what}: {code}: {message}", SkipKind.NOT_EVALUATED)
            # "{code} ({message})", not "{code}: {message}": the report masks the word after
            # "ExpiredTokenException:" as a token's value
            said = f"{what} answered {code} ({message.rstrip('.')}); {error_hint(code, what, message)}"
            if code in EXPIRED or code in REJECTED:
                # every AWS fact's reason, so not "{code}: {message}" either
                self.rejected = Missing(
                    f"not read: AWS rejected the credentials ({what} answered {code}, {message.rstrip('.')})",
                    SkipKind.NOT_EVALUATED,
                )
                self.problems.append(f"AWS side not read: {said}")
                return self.rejected
            elif code in THROTTLED and not self.throttled:
                self.throttled = True
                self.problems.append(f"AWS side partly read: {said}")
            return missing
        except NoCredentialsError as exc:
            self.rejected = Missing(f"{what}: {type(exc).__name__}: {exc}", SkipKind.NOT_EVALUATED)
            self.problems.append(
                f"AWS side not read: {exc}: pass --profile, set AWS_PROFILE, or run aws configure"
            )
            return self.rejected
        except BotoCoreError as exc:
            return Missing(f"{what}: {type(exc).__name__}: {exc}", SkipKind.NOT_EVALUATED)


def _cluster(account: AwsAccount, name: str) -> tuple[EksCluster, Mapping[str, Any]]:
    data = account.client("eks").describe_cluster(name=name)["cluster"]
    vpc = data.get("resourcesVpcConfig") or {}
    cluster = EksCluster(
        name=name,
        authentication_mode=(data.get("accessConfig") or {}).get("authenticationMode"),
        subnet_ids=tuple(vpc.get("subnetIds") or ()),
        oidc_issuer=((data.get("identity") or {}).get("oidc") or {}).get("issuer"),
        version=data.get("version"),
    )
    return cluster, vpc


def _addons(account: AwsAccount, cluster: str) -> dict[str, Addon]:
    eks = account.client("eks")
    names: list[str] = []
    token: str | None = None
    while True:
        page = eks.list_addons(clusterName=cluster, **({"nextToken": token} if token else {}))
        names.extend(page.get("addons") or [])
        token = page.get("nextToken")
        if not token:
            break
    addons = {}
    for name in names:
        data = eks.describe_addon(clusterName=cluster, addonName=name)["addon"]
        addons[name] = Addon(
            name=name,
            version=data.get("addonVersion"),
            status=data.get("status"),
            service_account_role_arn=data.get("serviceAccountRoleArn"),
            configuration_values=data.get("configurationValues"),
        )
    return addons


def _role_arns_from_addons(addons: Mapping[str, Addon]) -> list[str]:
    arns = []
    for addon in addons.values():
        if addon.service_account_role_arn:
            arns.append(addon.service_account_role_arn)
        if addon.configuration_values:
            try:
                values = json.loads(addon.configuration_values)
            except ValueError:
                continue
            arn = ((values.get("inferenceGateway") or {}).get("serviceAccount") or {}).get("roleArn")
            if arn:
                arns.append(str(arn))
    return arns


def _document(raw: Any) -> Mapping[str, Any]:
    if isinstance(raw, str):
        return dict(json.loads(unquote(raw)))
    return dict(raw or {})


def _role(account: AwsAccount, arn: str) -> IamRole:
    iam = account.client("iam")
    name = arn.rsplit("/", 1)[-1]
    role = iam.get_role(RoleName=name)["Role"]
    policies: list[tuple[str, Mapping[str, Any]]] = []
    for policy_name in iam.list_role_policies(RoleName=name).get("PolicyNames") or []:
        doc = iam.get_role_policy(RoleName=name, PolicyName=policy_name)["PolicyDocument"]
        policies.append((policy_name, _document(doc)))
    managed = []
    for attached in iam.list_attached_role_policies(RoleName=name).get("AttachedPolicies") or []:
        policy_arn = attached["PolicyArn"]
        managed.append(policy_arn)
        version = iam.get_policy(PolicyArn=policy_arn)["Policy"]["DefaultVersionId"]
        doc = iam.get_policy_version(PolicyArn=policy_arn, VersionId=version)["PolicyVersion"]["Document"]
        policies.append((policy_arn, _document(doc)))
    return IamRole(
        name=name,
        arn=str(role["Arn"]),
        trust_policy=_document(role.get("AssumeRolePolicyDocument")),
        policies=tuple(policies),
        managed_policy_arns=tuple(managed),
    )


def _subnets(account: AwsAccount, ids: Iterable[str]) -> list[Subnet]:
    data = account.client("ec2").describe_subnets(SubnetIds=list(ids))
    return [
        Subnet(
            id=s["SubnetId"],
            tags={t["Key"]: t.get("Value", "") for t in s.get("Tags") or []},
            availability_zone=s.get("AvailabilityZone"),
        )
        for s in data.get("Subnets") or []
    ]


def _load_balancers(account: AwsAccount, vpc_id: str | None) -> list[LoadBalancer]:
    elbv2, ec2 = account.client("elbv2"), account.client("ec2")
    out = []
    for lb in elbv2.describe_load_balancers().get("LoadBalancers") or []:
        if vpc_id and lb.get("VpcId") != vpc_id:
            continue
        arn = lb["LoadBalancerArn"]
        listeners = []
        for li in elbv2.describe_listeners(LoadBalancerArn=arn).get("Listeners") or []:
            protocol = str(li.get("Protocol", "")).upper()
            secure = protocol in (
                "HTTPS",
                "TLS",
            )  # moto also returns SslPolicy on HTTP listeners: key on protocol
            redirect = any(a.get("Type") == "redirect" for a in li.get("DefaultActions") or [])
            listeners.append(
                Listener(
                    protocol=protocol,
                    port=li.get("Port"),
                    ssl_policy=li.get("SslPolicy") if secure else None,
                    ssl_policy_explicit=True,
                    redirects_to_https=redirect,
                )
            )
        lb_type = str(lb.get("Type", "application"))
        drop: bool | None = None
        if lb_type == "application":
            attrs = elbv2.describe_load_balancer_attributes(LoadBalancerArn=arn).get("Attributes") or []
            values = {a["Key"]: a.get("Value") for a in attrs}
            drop = values.get("routing.http.drop_invalid_header_fields.enabled") == "true"
        cidrs: list[str] = []
        groups = lb.get("SecurityGroups") or []
        if groups:
            for sg in ec2.describe_security_groups(GroupIds=groups).get("SecurityGroups") or []:
                for perm in sg.get("IpPermissions") or []:
                    cidrs.extend(r["CidrIp"] for r in perm.get("IpRanges") or [])
                    cidrs.extend(r["CidrIpv6"] for r in perm.get("Ipv6Ranges") or [])
        out.append(
            LoadBalancer(
                resource=f"{lb_type} load balancer {lb.get('LoadBalancerName')}",
                type=lb_type,
                scheme=str(lb.get("Scheme", "internal")),
                scheme_explicit=True,
                listeners=tuple(listeners),
                inbound_cidrs=tuple(cidrs) if groups else None,
                drop_invalid_header_fields=drop,
            )
        )
    return out


def _published_versions(account: AwsAccount, kubernetes_version: str) -> dict[str, list[dict[str, Any]]]:

    eks = account.client("eks")
    published: dict[str, list[dict[str, Any]]] = {}
    for name, _pinned in pins.pinned_addons():
        versions: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"addonName": name, "kubernetesVersion": kubernetes_version}
        while True:
            page = eks.describe_addon_versions(**kwargs)
            for addon in page.get("addons") or []:
                versions.extend(addon.get("addonVersions") or [])
            if not page.get("nextToken"):
                break
            kwargs["nextToken"] = page["nextToken"]
        published[name] = versions
    return published


def _hyperpod_instance_counts(account: AwsAccount, cluster_name: str) -> dict[str, int]:
    """Instances per type in every HyperPod cluster orchestrated by this EKS cluster."""
    eks_arn = account.client("eks").describe_cluster(name=cluster_name)["cluster"]["arn"]
    sagemaker = account.client("sagemaker")
    counts: dict[str, int] = {}
    for page in sagemaker.get_paginator("list_clusters").paginate():
        for summary in page.get("ClusterSummaries") or []:
            cluster = sagemaker.describe_cluster(ClusterName=summary["ClusterName"])
            if ((cluster.get("Orchestrator") or {}).get("Eks") or {}).get("ClusterArn") != eks_arn:
                continue
            for group in cluster.get("InstanceGroups") or []:
                wanted = int(group.get("TargetCount", group.get("CurrentCount", 0)))
                counts[group["InstanceType"]] = counts.get(group["InstanceType"], 0) + wanted
    return counts


def quota_values(service_quotas: Any) -> dict[str, float]:
    """Every SageMaker quota of the account by name (``ListServiceQuotas``, all pages)."""
    quotas: dict[str, float] = {}
    for page in service_quotas.get_paginator("list_service_quotas").paginate(ServiceCode=QUOTA_SERVICE_CODE):
        for quota in page.get("Quotas") or []:
            quotas[str(quota.get("QuotaName", ""))] = float(quota.get("Value", 0.0))
    return quotas


def instance_quotas(counts: Mapping[str, int], values: Mapping[str, float]) -> list[InstanceQuota]:
    """Requested instances per type next to the account's cluster-usage quota for it."""
    return [
        InstanceQuota(
            instance_type=instance_type,
            requested=requested,
            quota=values.get(QUOTA_NAME.format(instance_type=instance_type)),
        )
        for instance_type, requested in sorted(counts.items())
    ]


def _instance_quotas(account: AwsAccount, cluster_name: str) -> list[InstanceQuota]:
    counts = _hyperpod_instance_counts(account, cluster_name)
    if not counts:
        return []
    return instance_quotas(counts, quota_values(account.client("service-quotas")))


def aws_view(account: AwsAccount, *, cluster_name: str, extra_role_arns: Iterable[str] = ()) -> AwsView:
    """Every AWS fact the checks read, each one independently ``Missing`` on failure (all of them for
    rejected credentials); what is said once is in ``problems``."""
    reads = _Reads()
    _attempt = reads.attempt
    described = _attempt(f"eks:DescribeCluster {cluster_name}", lambda: _cluster(account, cluster_name))
    if isinstance(described, Missing):
        cluster: EksCluster | Missing = described
        vpc: Mapping[str, Any] = {}
        subnets: list[Subnet] | Missing = described
    else:
        cluster, vpc = described
        ids = cluster.subnet_ids
        subnets = _attempt("ec2:DescribeSubnets", lambda: _subnets(account, ids)) if ids else []
    addons = _attempt("eks:ListAddons/DescribeAddon", lambda: _addons(account, cluster_name))
    arns = list(
        dict.fromkeys(
            [*extra_role_arns, *(_role_arns_from_addons(addons) if isinstance(addons, dict) else [])]
        )
    )
    roles: list[IamRole] | Missing = []
    for arn in arns:
        role = _attempt(f"iam:GetRole {arn}", lambda arn=arn: _role(account, arn))  # type: ignore[misc]
        if isinstance(role, Missing):
            roles = role
            break
        assert isinstance(roles, list)
        roles.append(role)
    vpc_id = vpc.get("vpcId")
    lbs = _attempt("elasticloadbalancing:DescribeLoadBalancers", lambda: _load_balancers(account, vpc_id))
    published: dict[str, list[dict[str, Any]]] | Missing = Missing(
        "the cluster's Kubernetes version is unknown"
    )
    if isinstance(cluster, EksCluster) and cluster.version:
        version = cluster.version
        published = _attempt("eks:DescribeAddonVersions", lambda: _published_versions(account, version))
    quotas: list[InstanceQuota] | Missing = Missing(
        "sagemaker/service-quotas clients not given", SkipKind.NOT_APPLICABLE
    )
    if account.provides("sagemaker") and account.provides("service-quotas"):
        quotas = _attempt(
            "sagemaker:DescribeCluster/servicequotas:ListServiceQuotas",
            lambda: _instance_quotas(account, cluster_name),
        )
    return AwsView(
        cluster=cluster,
        addons=addons,
        roles=roles,
        subnets=subnets,
        load_balancers=lbs,
        published_addon_versions=published,
        instance_quotas=quotas,
        problems=reads.problems,
    )
