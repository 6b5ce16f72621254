"""``spec.podDefaults.resources``: each limit must be at least its request, compared as quantities.

The API server refuses a Deployment whose pod template has a limit below its request, so such a spec
was admitted (``Accepted=True``) and the operator then failed to apply the gateway's Deployment. It is
refused at admission now, naming the limit, like every other spec problem.

Not a CEL admission rule (``schemas/admission-rules.yaml``): comparing ``500m`` with ``1`` needs the
API server's ``quantity()`` CEL library, which the project's CEL implementation (cel-python, with
which the CRD's rules are tested) does not have; the API server's own Deployment validation remains
the backstop in the cluster. Values of the wrong shape are skipped: the schema reports those.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final

from igw.config.errors import Problem
from igw.config.jsonpath import format_path

RULE: Final = "limits-not-below-requests"
PATH: Final = ("spec", "podDefaults", "resources")

_QUANTITY: Final = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<suffix>[KMGTPE]i|[numkMGTPE])|[eE](?P<exponent>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)))?$"
)
_FACTORS: Final[Mapping[str, Decimal]] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    **{unit: Decimal(1024) ** power for power, unit in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), 1)},
}


def parse_quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity (``500m``, ``2Gi``, ``1e3``, ``4``) in its base unit; ``None`` if not one."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    found = _QUANTITY.match(str(value))
    if found is None:
        return None
    number = Decimal(found["number"])
    if found["exponent"] is not None:
        return number * Decimal(10) ** Decimal(found["exponent"])
    return number * _FACTORS[found["suffix"] or ""]


def resource_problems(doc: Mapping[str, Any]) -> list[Problem]:
    """One problem per ``spec.podDefaults.resources.limits.<name>`` below its request."""
    node: Any = doc
    for part in PATH:
        node = node.get(part) if isinstance(node, Mapping) else None
    if not isinstance(node, Mapping):
        return []
    limits, requests = node.get("limits"), node.get("requests")
    if not isinstance(limits, Mapping) or not isinstance(requests, Mapping):
        return []
    found: list[Problem] = []
    for name, limit in limits.items():
        limit_value, request_value = parse_quantity(limit), parse_quantity(requests.get(name))
        if limit_value is None or request_value is None or limit_value >= request_value:
            continue
        request_path = format_path((*PATH, "requests", name))
        found.append(
            Problem(
                path=format_path((*PATH, "limits", name)),
                message=f"must be at least {request_path} ({json.dumps(requests[name])}); got "
                f"{json.dumps(limit)} (the API server refuses the gateway's pods otherwise)",
                rule=RULE,
            )
        )
    return found
