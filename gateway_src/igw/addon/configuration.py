"""Local validation of the add-on's ``configurationValues`` — the same check EKS runs server-side
(draft-06 schema from ``describe-addon-configuration``) plus the InferenceGatewayConfig admission rules
for ``gateway.config``, so a bad value fails on the operator's machine, before any API call, with the
field's path.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import jsonschema

from igw.addon import chart, schemas
from igw.config.documents import DocumentReadError, parse_text
from igw.config.validate import validate_document
from igw.errors import IgwToolingError


class ConfigurationValuesError(IgwToolingError, ValueError):
    """``configurationValues`` are unreadable or invalid; ``problems`` names each field."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid configuration values:\n" + "\n".join(f"  {p}" for p in self.problems))


@lru_cache(maxsize=1)
def _validator() -> jsonschema.protocols.Validator:
    schema = schemas.addon_configuration_schema()
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


def _path(parts: Sequence[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(root)"


def problems(values: Mapping[str, Any]) -> list[str]:
    """Every problem in ``values`` as ``path: message``; empty when EKS would accept them."""
    errors = sorted(
        _validator().iter_errors(values), key=lambda e: (list(map(str, e.absolute_path)), e.message)
    )
    found = [f"{_path(list(error.absolute_path))}: {error.message}" for error in errors]
    gateway = values.get("gateway")
    config = gateway.get("config") if isinstance(gateway, Mapping) else None
    if not found and isinstance(config, Mapping) and "spec" in config:
        found += [f"gateway.config.{p}" for p in _igwc_problems(config)]
    return found


def operator_mode_problems(values: Mapping[str, Any]) -> list[str]:
    """Values the chart's ``mode: operator`` (the default) never reads, one problem each.

    EKS accepts them (the schema is shared by both modes), and they silently changed nothing:
    ``service.scheme`` or ``replicaCount`` in ``igw addon create --configuration-values`` looked applied.
    The CDK app already refused them; the CLI now does too."""
    if values.get("mode", "operator") != "operator":
        return []
    return [
        f"{key}: has no effect with the chart's mode operator (each InferenceGatewayConfig sets its "
        f"gateway's replicas, Service and TLS; its pods call no AWS API); remove it, or set mode: gateway"
        for key in chart.GATEWAY_MODE_ONLY_VALUES
        if key in values
    ]


def _igwc_problems(config: Mapping[str, Any]) -> list[str]:

    document = {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": config.get("name", "default")},
        "spec": config["spec"],
    }
    return [str(problem) for problem in validate_document(document)]


def parse(text: str, *, source: str = "configuration values") -> dict[str, Any]:
    """Decode ``configurationValues`` (JSON or YAML, as the EKS API and CLI accept) into a mapping.

    Read like every configuration file (:mod:`igw.config.documents`): a file nested thousands of
    levels deep ended ``igw addon create`` in a ``RecursionError`` traceback, and YAML aliases
    expanding to billions of values would have been walked by the schema check and ``json.dumps``."""
    if not text.strip():
        return {}
    try:
        documents = parse_text(text, source=source)
    except DocumentReadError as exc:
        raise ConfigurationValuesError([f"not valid JSON or YAML, or refused: {exc}"]) from exc
    if len(documents) > 1:
        raise ConfigurationValuesError([f"(root): one document expected, got {len(documents)}"])
    data = documents[0].content if documents else None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigurationValuesError([f"(root): expected an object, got {type(data).__name__}"])
    return data


def validated(values: Mapping[str, Any]) -> str:
    """The values as the JSON string ``create_addon`` takes; raises if any problem is found."""
    found = problems(values)
    if found:
        raise ConfigurationValuesError(found)
    return json.dumps(values, sort_keys=True, separators=(",", ":"))
