"""IAM policy reading for checks: statements, action matching, wildcards, trust scoping.

Managed policies attached in a template cannot be fetched offline, so the few we rely on are kept
here as data (their action lists from the AWS managed-policy reference); live scans read the real
documents instead.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from igw.addon.pins import GATEWAY_SERVICE_ACCOUNT
from igw.checks.inventory import IamRole

GATEWAY_ACTIONS: Final = (
    "acm:ImportCertificate",
    "acm:AddTagsToCertificate",
    "acm:DescribeCertificate",
    "acm:DeleteCertificate",
)
"""What the gateway's certificate-issuer role must be allowed to do (HyperPod inference set-up guide)."""

KNOWN_MANAGED_POLICIES: Final[Mapping[str, tuple[str, ...]]] = {
    "AmazonSageMakerHyperPodInferenceGatewayAccess": GATEWAY_ACTIONS,
    "AdministratorAccess": ("*",),
}

GATEWAY_SERVICE_ACCOUNTS: Final = (GATEWAY_SERVICE_ACCOUNT, "inference-gateway-controller")


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def statements(document: Any) -> Iterator[Mapping[str, Any]]:
    """Statements of a policy document; nothing for a document we cannot read (an unresolved token)."""
    if not isinstance(document, Mapping):
        return
    for stmt in _as_list(document.get("Statement")):
        if isinstance(stmt, Mapping):
            yield stmt


def _actions(stmt: Mapping[str, Any]) -> list[str]:
    return [a for a in _as_list(stmt.get("Action")) if isinstance(a, str)]


def action_matches(pattern: str, action: str) -> bool:
    return fnmatch.fnmatchcase(action.lower(), pattern.lower())


def managed_policy_name(arn: str) -> str:
    return arn.rsplit("/", 1)[-1]


def effective_documents(role: IamRole) -> list[tuple[str, Mapping[str, Any]]]:
    """Inline and attached documents; managed policies we only know by ARN are filled from the table."""
    docs = list(role.policies)
    known = {name for name, _ in docs}
    for arn in role.managed_policy_arns:
        name = managed_policy_name(arn)
        if arn in known or name in known or name not in KNOWN_MANAGED_POLICIES:
            continue
        actions = list(KNOWN_MANAGED_POLICIES[name])
        docs.append((arn, {"Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]}))
    return docs


def allows(role: IamRole, action: str) -> bool:
    allowed = denied = False
    for _, doc in effective_documents(role):
        for stmt in statements(doc):
            if any(action_matches(p, action) for p in _actions(stmt)):
                if stmt.get("Effect") == "Deny":
                    denied = True
                elif stmt.get("Effect") == "Allow":
                    allowed = True
    return allowed and not denied


def wildcard_actions(role: IamRole) -> list[tuple[str, str]]:
    """``(policy, action)`` for Allow statements whose action is ``*`` or ``service:*``.

    ``*:*`` is reported as ``*`` (it matches every action too), and an Allow with ``NotAction``
    as ``*`` as well: it grants every action but the few it lists, which passed as "explicit
    actions only" because it has no ``Action`` to read.
    """
    found = []
    for name, doc in effective_documents(role):
        for stmt in statements(doc):
            if stmt.get("Effect") != "Allow":
                continue
            if "NotAction" in stmt:
                found.append((name, "*"))
            for action in _actions(stmt):
                if action in ("*", "*:*"):
                    found.append((name, "*"))
                elif action.endswith(":*"):
                    found.append((name, action))
    return found


def pass_role_anywhere(role: IamRole) -> list[str]:
    """Policies that allow ``iam:PassRole`` on every role (``Resource: "*"`` or ``…:role/*``).

    Passing any role of the account to a service the pod can drive (EC2, Lambda, SageMaker) hands it
    that role's permissions: privilege escalation without a single wildcard *action*.
    """
    found = []
    for name, doc in effective_documents(role):
        for stmt in statements(doc):
            if stmt.get("Effect") != "Allow" or "NotAction" in stmt:
                continue
            if not any(action_matches(a, "iam:PassRole") for a in _actions(stmt)):
                continue
            resources = [str(r) for r in _as_list(stmt.get("Resource"))]
            if "NotResource" in stmt or any(r == "*" or r.endswith(":role/*") for r in resources):
                found.append(name)
    return found


def is_gateway_role(role: IamRole) -> bool:
    """Heuristic for templates and accounts: the trust names the gateway's service account."""
    trust = json.dumps(role.trust_policy)
    return any(f":{sa}" in trust for sa in GATEWAY_SERVICE_ACCOUNTS)


def trust_problems(role: IamRole) -> list[str]:
    """Why the trust policy is not scoped to one service account (empty when it is)."""
    problems = []
    for stmt in statements(role.trust_policy):
        if stmt.get("Effect") != "Allow":
            continue
        principal = stmt.get("Principal")
        if principal == "*" or (isinstance(principal, Mapping) and "*" in _as_list(principal.get("AWS"))):
            problems.append("any AWS principal may assume the role (Principal '*')")
            continue
        if not isinstance(principal, Mapping):
            continue
        services = [str(s) for s in _as_list(principal.get("Service"))]
        if "pods.eks.amazonaws.com" in services:
            continue  # Pod Identity: the association scopes the role to one service account
        if not principal.get("Federated"):
            continue
        raw_condition = stmt.get("Condition")
        condition: Mapping[str, Any] = raw_condition if isinstance(raw_condition, Mapping) else {}
        sub_values = _condition_values(condition, ":sub")
        if not sub_values:
            problems.append(
                "web-identity trust has no ':sub' condition: any service account in the cluster "
                "(any pod with a projected token) can assume it"
            )
        elif any("*" in v or "?" in v for v in sub_values):
            problems.append(f"':sub' condition uses a wildcard ({', '.join(sub_values)})")
        elif not _condition_values(condition, ":aud"):
            problems.append("web-identity trust has no ':aud' condition (expected sts.amazonaws.com)")
    return problems


def _condition_values(condition: Mapping[str, Any], suffix: str) -> list[str]:
    values: list[str] = []
    for block in condition.values():
        if not isinstance(block, Mapping):
            continue
        for key, value in block.items():
            key_text = json.dumps(key) if not isinstance(key, str) else key
            if key_text.endswith(suffix) or key_text.endswith(f'{suffix}"]]}}'):
                values.extend(str(v) for v in _as_list(value))
    return values


def role_refs(role: IamRole) -> Sequence[str]:
    return (role.arn, role.name)
