"""Source: CloudFormation templates synthesized by CDK (``cdk.out/*.template.json``).

Templates hold both sides: AWS resources (cluster, add-ons, roles, subnets, load balancers) and,
inside ``Custom::AWSCDK-EKS-KubernetesResource`` / ``…-HelmChart`` resources, the Kubernetes
manifests and charts the stack applies. CloudFormation intrinsics (``Ref``, ``Fn::GetAtt``,
``Fn::Join``, ``Fn::Sub``) are rendered to readable placeholders such as ``${GatewayRole.Arn}`` so
that policies and manifests can be inspected without deploying.

Derived facts are marked: a Helm chart becomes a declared Deployment named after the chart (so
"LBC/cert-manager declared" checks work), and our add-on's ``AWS::EKS::Addon`` implies the CRD it
installs. A container environment value of an ECS task definition that holds a GlobalRouterConfig
(the global router stack passes its configuration so, ``cdk/stacks/global_router_stack.py``) is read
as that object, so the checks of GlobalRouterConfig objects see the router the stack deploys.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from igw.addon.pins import ADDON_NAME, CHART_NAME
from igw.checks.inventory import (
    Addon,
    AwsView,
    EksCluster,
    IamRole,
    Inventory,
    Listener,
    LoadBalancer,
    Manifest,
    Missing,
    SourceLocation,
    Subnet,
)
from igw.checks.k8s import DERIVED_ANNOTATION, ref
from igw.checks.loadbalancers import APPROVAL_ANNOTATION
from igw.checks.sources.documents import static_view
from igw.checks.tls_policies import AWS_DEFAULT_POLICY
from igw.config.documents import MANIFEST_LIMITS, DocumentReadError, parse_one, parse_text, read_text
from igw.config.model import API_GROUP, API_VERSION

SOURCE_PREFIX: Final = "cdk.out "
"""How an inventory read from CDK output names its source (``Inventory.source``)."""


def render(value: Any, cfn_json: Mapping[str, Any] | None = None) -> Any:
    """Replace CloudFormation intrinsics by strings; leave plain data alone.

    ``cfn_json`` maps ``Custom::AWSCDKCfnJson`` logical IDs to their parsed values: CDK routes IAM
    conditions with token keys (the OIDC provider's ``…:sub``) through such a resource, and
    ``Fn::GetAtt [id, Value]`` must resolve to the condition itself for trust checks to see it.
    """
    lookups = cfn_json or {}
    if isinstance(value, list):
        return [render(v, lookups) for v in value]
    if not isinstance(value, Mapping):
        return value
    if len(value) == 1:
        ((key, arg),) = value.items()
        if key == "Ref":
            return f"${{{arg}}}"
        if key == "Fn::GetAtt":
            parts = arg if isinstance(arg, list) else str(arg).split(".", 1)
            if len(parts) == 2 and parts[1] == "Value" and parts[0] in lookups:
                return lookups[parts[0]]
            return f"${{{'.'.join(str(p) for p in parts)}}}"
        if key == "Fn::Join" and isinstance(arg, list) and len(arg) == 2:
            return str(arg[0]).join(str(render(p, lookups)) for p in arg[1] or [])
        if key == "Fn::Sub":
            return str(arg[0] if isinstance(arg, list) else arg)
        if key.startswith("Fn::"):
            return f"${{{key}}}"
    return {k: render(v, lookups) for k, v in value.items()}


def _cfn_json_values(template: Mapping[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for logical, kind, props in _resources(template):
        if kind == "Custom::AWSCDKCfnJson":
            text = render(props.get("Value"))
            try:
                values[logical] = _json_value(text, source=logical) if isinstance(text, str) else text
            except DocumentReadError:
                continue
    return values


def _json_value(text: str, *, source: str) -> Any:
    """The JSON value a template's string holds (a ``Custom::AWSCDKCfnJson`` value, a Kubernetes
    manifest), read within the checks' limits: ``DocumentReadError`` (a ``ValueError``) when it is
    not JSON, holds a key twice, or nests deeper than they allow (``json`` itself ended the whole
    scan in a ``RecursionError``)."""
    if not text.lstrip().startswith(("{", "[")):  # a scalar (nothing nests) or not JSON
        try:
            return json.loads(text)
        except ValueError as exc:
            raise DocumentReadError(f"{source}: not JSON: {exc}") from None
    return parse_one(text, source=source, limits=MANIFEST_LIMITS, field_lines=False).content


def _resources(template: Mapping[str, Any]) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    resources = template.get("Resources")
    if not isinstance(resources, Mapping):
        return
    for logical, resource in resources.items():
        if isinstance(resource, Mapping):
            props = resource.get("Properties")
            yield str(logical), str(resource.get("Type", "")), props if isinstance(props, Mapping) else {}


def _tags(raw: Any) -> dict[str, str]:
    tags = render(raw) or []
    if isinstance(tags, Mapping):
        return {str(k): str(v) for k, v in tags.items()}
    return {str(t.get("Key")): str(t.get("Value")) for t in tags if isinstance(t, Mapping)}


def _rule_cidrs(rule: Any) -> list[str]:
    """The IPv4 and IPv6 ranges an ingress rule (inline or a resource's properties) admits."""
    if not isinstance(rule, Mapping):
        return []
    return [str(render(rule[key])) for key in ("CidrIp", "CidrIpv6") if rule.get(key)]


def _group_key(rendered: Any) -> str:
    """The logical ID a rendered security-group reference (``${Sg.GroupId}``, ``${Sg}``) names."""
    return str(rendered).strip("${}").removesuffix(".GroupId")


def _policy_targets(props: Mapping[str, Any]) -> list[str]:
    return [str(r) for r in render(props.get("Roles") or [])]


class _TemplateReader:
    def __init__(self) -> None:
        self.clusters: list[EksCluster] = []
        self.addons: dict[str, Addon] = {}
        self.roles: dict[str, dict[str, Any]] = {}
        self.detached_policies: list[tuple[list[str], str, Mapping[str, Any]]] = []
        self.subnets: list[Subnet] = []
        self.lbs: dict[str, dict[str, Any]] = {}
        self.listeners: list[tuple[str, Mapping[str, Any]]] = []
        self.security_groups: dict[str, list[str]] = {}
        self.separate_ingress: dict[str, list[str]] = {}
        """CIDRs of ``AWS::EC2::SecurityGroupIngress`` resources, by the group they open."""
        self.manifests: list[Any] = []
        self.errors: list[str] = []
        self.cfn_json: dict[str, Any] = {}
        self.locations: dict[str, SourceLocation] = {}
        self._file = ""
        self._lines: Mapping[str, int] = {}

    def read(self, name: str, template: Mapping[str, Any], lines: Mapping[str, int] | None = None) -> None:
        """Read one template; ``lines`` (logical ID -> line) lets results point into the file."""
        self._file, self._lines = name, lines or {}
        self.cfn_json = _cfn_json_values(template)
        for logical, kind, props in _resources(template):
            handler = getattr(self, "_" + kind.replace("::", "_").replace("-", "_"), None)
            if handler is not None:
                try:
                    handler(logical, props)
                except (TypeError, ValueError, KeyError) as exc:
                    self.errors.append(f"{name}: {logical} ({kind}): {exc}")

    def _AWS_EKS_Cluster(self, logical: str, props: Mapping[str, Any]) -> None:  # noqa: N802
        vpc = props.get("ResourcesVpcConfig") or {}
        mode = (props.get("AccessConfig") or {}).get("AuthenticationMode")
        self.clusters.append(
            EksCluster(
                name=str(render(props.get("Name")) or logical),
                authentication_mode=str(mode) if mode else None,
                subnet_ids=tuple(str(s) for s in render(vpc.get("SubnetIds") or [])),
                version=str(props.get("Version")) if props.get("Version") else None,
            )
        )

    def _Custom_AWSCDK_EKS_Cluster(self, logical: str, props: Mapping[str, Any]) -> None:  # noqa: N802
        config = render(props.get("Config") or {})
        mode = (config.get("accessConfig") or {}).get("authenticationMode")
        self.clusters.append(
            EksCluster(
                name=str(config.get("name") or logical),
                authentication_mode=str(mode) if mode else None,
                subnet_ids=tuple(
                    str(s) for s in (config.get("resourcesVpcConfig") or {}).get("subnetIds") or []
                ),
            )
        )

    def _AWS_EKS_Addon(self, logical: str, props: Mapping[str, Any]) -> None:  # noqa: N802
        name = str(render(props.get("AddonName")))
        pod_identity = tuple(
            str(render(a.get("RoleArn"))) for a in props.get("PodIdentityAssociations") or []
        )
        self.addons[name] = Addon(
            name=name,
            version=str(props["AddonVersion"]) if props.get("AddonVersion") else None,
            service_account_role_arn=str(render(props["ServiceAccountRoleArn"]))
            if props.get("ServiceAccountRoleArn")
            else None,
            configuration_values=str(render(props.get("ConfigurationValues")))
            if props.get("ConfigurationValues")
            else None,
            pod_identity_role_arns=pod_identity,
        )

    def _AWS_IAM_Role(self, logical: str, props: Mapping[str, Any]) -> None:  # noqa: N802
        inline = [
            (str(p.get("PolicyName", "inline")), render(p.get("PolicyDocument") or {}, self.cfn_json))
            for p in props.get("Policies") or []
            if isinstance(p, Mapping)
        ]
        self.roles[logical] = {
            "name": str(render(props.get("RoleName")) or logical),
            "trust": render(props.get("AssumeRolePolicyDocument") or {}, self.cfn_json),
            "policies": inline,
            "managed": [str(render(a)) for a in props.get("ManagedPolicyArns") or []],
        }

    def _AWS_IAM_Policy(self, logical: str, props: Mapping[str, Any]) -> None:  # noqa: N802
        self.detached_policies.append(
            (
                _policy_targets(props),
                str(props.get("PolicyName") or logical),
                render(props.get("PolicyDocument") or {}),
            )
        )

    _AWS_IAM_ManagedPolicy = _AWS_IAM_Policy

    def _AWS_EC2_Subnet(self, logical: str, props: Mapping[str, Any]) -> None:  # noqa: N802
        az = props.get("AvailabilityZone")
        self.subnets.append(
            Subnet(
                id=logical, tags=_tags(props.get("Tags")), availability_zone=str(render(az)) if az else None
            )
        )

    def _AWS_ElasticLoadBalancingV2_LoadBalancer(self, logical: str, props: Mapping[str, Any]) -> None:  # noqa: N802
        attrs = {str(a.get("Key")): str(a.get("Value")) for a in props.get("LoadBalancerAttributes") or []}
        self.lbs[logical] = {
            "type": str(props.get("Type") or "application"),
            "scheme": props.get("Scheme"),
            "attrs": attrs,
            "sgs": [str(s) for s in render(props.get("SecurityGroups") or [])],
            "approved": _tags(props.get("Tags")).get(APPROVAL_ANNOTATION) == "true",
        }

    def _AWS_ElasticLoadBalancingV2_Listener(self, logical: str, props: Mapping[str, Any]) -> None:  # noqa: N802
        self.listeners.append((str(render(props.get("LoadBalancerArn"))), props))

    def _AWS_EC2_SecurityGroup(self, logical: str, props: Mapping[str, Any]) -> None:  # noqa: N802
        self.security_groups[logical] = [
            cidr for rule in props.get("SecurityGroupIngress") or [] for cidr in _rule_cidrs(rule)
        ]

    def _AWS_EC2_SecurityGroupIngress(self, logical: str, props: Mapping[str, Any]) -> None:  # noqa: N802
        # A rule of its own resource (CDK writes one when the rule names another stack's group, and
        # ``CfnSecurityGroupIngress`` always): it opens the group its ``GroupId`` names, wherever in
        # the template that group is declared. Left out, a group opened to 0.0.0.0/0 this way read
        # as "inbound none".
        group = _group_key(render(props.get("GroupId")))
        self.separate_ingress.setdefault(group, []).extend(_rule_cidrs(props))

    def _Custom_AWSCDK_EKS_KubernetesResource(self, logical: str, props: Mapping[str, Any]) -> None:  # noqa: N802
        text = render(props.get("Manifest"))
        docs = _json_value(text, source="Manifest") if isinstance(text, str) else text
        docs = docs if isinstance(docs, list) else [docs]
        self.manifests.extend(docs)
        for doc in docs:
            if isinstance(doc, Mapping) and doc.get("kind"):
                self.locations.setdefault(ref(doc), SourceLocation(self._file, self._lines.get(logical)))

    def _Custom_AWSCDK_EKS_HelmChart(self, logical: str, props: Mapping[str, Any]) -> None:  # noqa: N802
        # A chart from an asset (ours) has no Chart property; its release names it.
        chart = str(render(props.get("Chart") or props.get("Release")))
        namespace = str(render(props.get("Namespace") or "default"))
        self.manifests.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {
                    "name": chart,
                    "namespace": namespace,
                    "labels": {"app.kubernetes.io/name": chart},
                    "annotations": {DERIVED_ANNOTATION: f"Helm chart {chart} ({logical})"},
                },
                "spec": {"template": {"metadata": {"labels": {"app.kubernetes.io/name": chart}}, "spec": {}}},
            }
        )

    def _AWS_ECS_TaskDefinition(self, logical: str, props: Mapping[str, Any]) -> None:  # noqa: N802
        for container in props.get("ContainerDefinitions") or []:
            for variable in container.get("Environment") or [] if isinstance(container, Mapping) else []:
                value = (
                    render(variable.get("Value"), self.cfn_json) if isinstance(variable, Mapping) else None
                )
                if not isinstance(value, str) or "GlobalRouterConfig" not in value:
                    continue
                try:
                    docs = parse_text(value, source=logical, limits=MANIFEST_LIMITS, field_lines=False)
                except DocumentReadError:
                    continue  # a value that merely names the kind
                for doc in (d.content for d in docs):
                    if isinstance(doc, Mapping) and doc.get("kind") == "GlobalRouterConfig":
                        self.manifests.append(doc)
                        self.locations.setdefault(
                            ref(doc), SourceLocation(self._file, self._lines.get(logical))
                        )

    # ---- assembly -----------------------------------------------------------------------------------
    def iam_roles(self) -> list[IamRole]:
        roles = []
        for logical, data in self.roles.items():
            policies = list(data["policies"])
            for targets, name, doc in self.detached_policies:
                if f"${{{logical}}}" in targets or data["name"] in targets:
                    policies.append((name, doc))
            roles.append(
                IamRole(
                    name=data["name"],
                    arn=f"${{{logical}.Arn}}",
                    trust_policy=data["trust"],
                    policies=tuple(policies),
                    managed_policy_arns=tuple(data["managed"]),
                )
            )
        return roles

    def load_balancers(self) -> list[LoadBalancer]:
        out = []
        for logical, lb in self.lbs.items():
            listeners = []
            for target, props in self.listeners:
                if target not in (f"${{{logical}}}", logical):
                    continue
                protocol = str(props.get("Protocol") or "HTTP").upper()
                policy = props.get("SslPolicy")
                redirect = any(
                    isinstance(a, Mapping) and a.get("Type") == "redirect"
                    for a in props.get("DefaultActions") or []
                )
                secure = protocol in ("HTTPS", "TLS")
                listeners.append(
                    Listener(
                        protocol=protocol,
                        port=props.get("Port") if isinstance(props.get("Port"), int) else None,
                        ssl_policy=str(policy or AWS_DEFAULT_POLICY) if secure else None,
                        ssl_policy_explicit=policy is not None,
                        redirects_to_https=redirect,
                    )
                )
            cidrs: list[str] = []
            known = True
            for sg in lb["sgs"]:
                key = _group_key(sg)
                if key in self.security_groups:
                    cidrs.extend(self.security_groups[key])
                    cidrs.extend(self.separate_ingress.get(key, ()))
                else:
                    known = False
            lb_type = "network" if lb["type"] == "network" else "application"
            drop = lb["attrs"].get("routing.http.drop_invalid_header_fields.enabled")
            out.append(
                LoadBalancer(
                    resource=f"AWS::ElasticLoadBalancingV2::LoadBalancer {logical}",
                    type=lb_type,
                    scheme=str(lb["scheme"] or "internet-facing"),
                    scheme_explicit=lb["scheme"] is not None,
                    listeners=tuple(listeners),
                    inbound_cidrs=tuple(cidrs) if known and lb["sgs"] else None,
                    drop_invalid_header_fields=(drop == "true") if lb_type == "application" else None,
                    internet_facing_approved=lb["approved"],
                )
            )
        return out


def template_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    return sorted(root.rglob("*.template.json"))


def load_cdk_out(root: Path) -> Inventory:
    """Read every template under ``root`` into one inventory (nested stages included)."""
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such file or directory")
    reader = _TemplateReader()
    files = template_files(root)
    read = 0
    for path in files:
        try:
            text = read_text(path)
            if not text.lstrip().startswith("{"):
                reader.errors.append(f"{path}: not a CloudFormation template (a JSON object)")
                continue
            template = parse_one(text, source=str(path), limits=MANIFEST_LIMITS, field_lines=False).content
        except DocumentReadError as exc:  # the message names the file
            reader.errors.append(str(exc))
            continue
        if isinstance(template, Mapping):
            reader.read(str(path), template, _logical_id_lines(text))
            read += 1
        else:
            reader.errors.append(f"{path}: not a CloudFormation template (a JSON object)")
    # Nothing read is a mistake in the command, not an empty account: an empty folder or /etc/passwd
    # was checked as templates holding nothing, and preflight reported CRITICAL "add-on not
    # installed" findings (exit 1) about an account it never saw.
    if not files:
        raise FileNotFoundError(f"{root}: no *.template.json files (run cdk synth first)")
    if not read:
        raise FileNotFoundError(
            f"{root}: no CloudFormation template could be read: {'; '.join(reader.errors)}"
        )
    if ADDON_NAME in reader.addons or _has_our_chart(reader.manifests):
        reader.manifests.append(_implied_crd())
    source = f"{SOURCE_PREFIX}{root}"
    kube = static_view(reader.manifests, source=source)
    no_cluster = Missing("no AWS::EKS::Cluster in the templates")
    cluster: EksCluster | Missing = reader.clusters[0] if reader.clusters else no_cluster
    aws = AwsView(
        cluster=cluster,
        addons=reader.addons,
        roles=reader.iam_roles(),
        subnets=reader.subnets or Missing("no AWS::EC2::Subnet in the templates (imported VPC?)"),
        load_balancers=reader.load_balancers(),
    )
    default = SourceLocation(str(files[0])) if files else SourceLocation(str(root))
    return Inventory(
        kube=kube,
        aws=aws,
        source=source,
        errors=reader.errors,
        locations=reader.locations,
        default_location=default,
    )


_LOGICAL_ID_LINE = re.compile(r'^\s*"([A-Za-z0-9]+)":\s*\{\s*$')


def _logical_id_lines(text: str) -> dict[str, int]:
    """The 1-based line where each ``"LogicalId": {`` key first opens in a synthesized template."""
    lines: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        match = _LOGICAL_ID_LINE.match(line)
        if match:
            lines.setdefault(match.group(1), number)
    return lines


def _has_our_chart(manifests: list[Manifest]) -> bool:
    """Our chart (``crds.enabled`` by default) brings the InferenceGatewayConfig CRD."""
    return any(
        m.get("kind") == "Deployment" and (m.get("metadata") or {}).get("name") == CHART_NAME
        for m in manifests
    )


def _implied_crd() -> Manifest:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"inferencegatewayconfigs.{API_GROUP}",
            "annotations": {DERIVED_ANNOTATION: "installed by the gateway chart or add-on"},
        },
        "spec": {"group": API_GROUP, "versions": [{"name": API_VERSION, "served": True}]},
    }
