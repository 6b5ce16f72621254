"""AWS's rules for resource tags, checked on the deployment config's ``tags`` before synthesis.

The stacks put the config's tags on every resource (the ACM certificate, the VPC, the EKS and HyperPod
clusters, IAM roles, ...). Every one of those services refuses the same tags, but only at deploy time,
one resource after another, with CloudFormation rolling the stack back: a key starting ``aws:``
(reserved for AWS), an empty key, or a character outside letters, numbers, white space and
``_ . : / = + - @`` ("Tagging AWS resources", the pattern ``[\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*`` of the
``Tag`` shape in the ACM, EC2, EKS and SageMaker APIs). The JSON Schema bounds the count and the
lengths; Python's ``re`` has no ``\\p{..}`` classes, so the character set is checked here.

The count stays within AWS's 50 tags per resource: the schema allows 40, and the stacks add at most
five of their own to a resource (a new VPC's subnets: ``Name``, two ``aws-cdk:subnet-*`` and two for
the Load Balancer Controller).

The config's tags win over CDK's own (:data:`PRIORITY`): CDK names the new VPC's resources and the
endpoint's certificate after their construct paths (``Name``), and a user's ``Name`` lost there without
a word while it landed everywhere else. Keys whose value the stacks or CDK need per resource are
refused instead (:data:`STACK_OWNED`): the Load Balancer Controller finds the gateway's subnets by
``kubernetes.io/role/internal-elb``/``elb`` and ``kubernetes.io/cluster/<name>``, and CDK's own
``aws-cdk:`` tags mark what its custom resources may delete (``aws-cdk:auto-delete-objects``) and
what ``Vpc.fromLookup`` reads (``aws-cdk:subnet-type``). The operator's ``igw.dev/`` keys are
refused as well (:data:`OPERATOR_PREFIX`).

A CDK token marker in a key or value is reported once, by :mod:`cdk.cdk_tokens`; the characters
around it are still checked here.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Final

from cdk.cdk_tokens import STRING_MARKER

RESERVED_PREFIX: Final = "aws:"
"""Reserved for AWS in any letter case; a key starting with it is refused by every tagging API."""
PUNCTUATION: Final = frozenset("_.:/=+-@")
"""The characters besides letters (``\\p{L}``), white space (``\\p{Z}``) and numbers (``\\p{N}``)."""
PRIORITY: Final = 200
"""The priority the stacks apply the config's tags with: above CDK's default (100), which its own
``Name`` tags use, so the user's value wins where both set a key."""
STACK_OWNED: Final = {
    "kubernetes.io/role/internal-elb": "the stacks set it to 1 on the private subnets, where the Load "
    "Balancer Controller places the gateway's internal load balancer",
    "kubernetes.io/role/elb": "the stacks set it to 1 on the public subnets for the Load Balancer Controller",
    "kubernetes.io/cluster/": "the stacks set kubernetes.io/cluster/<clusterName> on the private subnets for "
    "the Load Balancer Controller",
    "aws-cdk:": "CDK's own tags say what its custom resources may delete (aws-cdk:auto-delete-objects) and "
    "which subnets Vpc.fromLookup finds (aws-cdk:subnet-type)",
}
"""Keys (or key prefixes, ending ``/`` or ``:``) the stacks or CDK set per resource, with why: a config
value would either lose there or land on every other resource, so it is refused."""
OPERATOR_PREFIX: Final = "igw.dev/"
"""The keys of the operator's ACM imports (:data:`igw.operator.tls.UID_TAG` and the others): its IAM role
may re-import or delete a certificate carrying the owner tag ``igw.dev/inference-gateway-config-uid``
(``aws:ResourceTag``, whose key IAM compares in any letter case) and writes ``igw.dev/*`` keys only,
and the orphan sweep deletes imports by ``igw.dev/cluster``. The config's tags land on the endpoint's
ACM certificate too, so such a key there put it in the operator's reach: refused, in any letter case.
Before session s42 it was accepted."""


def _bad_characters(text: str) -> list[str]:
    """The distinct characters of ``text`` that AWS's tag pattern refuses, in order of appearance."""
    seen: list[str] = []
    for char in text:
        allowed = char in PUNCTUATION or unicodedata.category(char)[0] in "LZN"
        if not allowed and char not in seen:
            seen.append(char)
    return seen


def _stack_owned(key: str) -> str | None:
    """Why ``key`` is one the stacks set per resource (any letter case), or ``None``."""
    lowered = key.lower()
    for owned, why in STACK_OWNED.items():
        if lowered == owned or (owned.endswith(("/", ":")) and lowered.startswith(owned)):
            return why
    return None


def problems(tags: Mapping[str, str], *, path: str = "tags") -> list[str]:
    """Each tag AWS would refuse, as ``<path>.<key>: why`` (``<path>: ...`` for an empty key)."""
    found: list[str] = []
    allowed = "letters, numbers, white space and _ . : / = + - @"
    for key, value in tags.items():
        where = f"{path}.{key}" if key else path
        if not key:
            found.append(f"{where}: an empty tag key (AWS needs 1 to 128 characters)")
        if key[: len(RESERVED_PREFIX)].lower() == RESERVED_PREFIX:
            found.append(f"{where}: the key prefix {key[:4]!r} is reserved for AWS; no resource accepts it")
        if key[: len(OPERATOR_PREFIX)].lower() == OPERATOR_PREFIX:
            found.append(
                f"{where}: the key prefix {key[: len(OPERATOR_PREFIX)]!r} is the igw operator's (its "
                "certificate imports' owner tags: on the endpoint's certificate the operator's role could "
                "re-import or delete it); use another key"
            )
        owned = _stack_owned(key)
        if owned is not None:
            found.append(f"{where}: a tag the stacks set per resource ({owned}); use another key")
        # A token marker is cdk_tokens' problem (reported once); the rest of the text is checked.
        bad = _bad_characters(STRING_MARKER.sub("", key))
        if bad:
            found.append(f"{where}: the key has {''.join(bad)!r}; AWS allows only {allowed}")
        bad = _bad_characters(STRING_MARKER.sub("", value))
        if bad:
            found.append(f"{where}: the value has {''.join(bad)!r}; AWS allows only {allowed}")
    return found
