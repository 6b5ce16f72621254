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
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Final

RESERVED_PREFIX: Final = "aws:"
"""Reserved for AWS in any letter case; a key starting with it is refused by every tagging API."""
PUNCTUATION: Final = frozenset("_.:/=+-@")
"""The characters besides letters (``\\p{L}``), white space (``\\p{Z}``) and numbers (``\\p{N}``)."""


def _bad_characters(text: str) -> list[str]:
    """The distinct characters of ``text`` that AWS's tag pattern refuses, in order of appearance."""
    seen: list[str] = []
    for char in text:
        allowed = char in PUNCTUATION or unicodedata.category(char)[0] in "LZN"
        if not allowed and char not in seen:
            seen.append(char)
    return seen


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
        bad = _bad_characters(key)
        if bad:
            found.append(f"{where}: the key has {''.join(bad)!r}; AWS allows only {allowed}")
        bad = _bad_characters(value)
        if bad:
            found.append(f"{where}: the value has {''.join(bad)!r}; AWS allows only {allowed}")
    return found
