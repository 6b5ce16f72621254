"""Local validation of the add-on's ``configurationValues`` — the same check EKS runs server-side
(draft-06 schema from ``describe-addon-configuration``) plus the InferenceGatewayConfig admission rules
for ``gateway.config``, so a bad value fails on the operator's machine, before any API call, with the
field's path.

Errors name the value's path and the rule it breaks, and quote at most a short excerpt of the value
passed through the gateway's redaction (:func:`igw.redaction.redact_value`) before it is cut:
configuration values hold tokens and passwords (a Redis URL, an OTLP header, a pull secret), and the
messages end up in terminals, CI logs and CloudFormation events. jsonschema's own messages quoted the
whole value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, Final

import jsonschema

from igw.addon import chart, schemas
from igw.config.documents import DocumentReadError, parse_text
from igw.config.errors import Problem
from igw.config.schema_messages import ProblemCollector
from igw.config.schema_validator import schema_validator
from igw.config.validate import validate_document
from igw.errors import IgwToolingError
from igw.redaction import redact_value

EXCERPT_MAX_CHARS: Final = 40
"""The longest excerpt of a value an error quotes (after redaction; longer ones end in ``...``)."""


class ConfigurationValuesError(IgwToolingError, ValueError):
    """``configurationValues`` are unreadable or invalid; ``problems`` names each field."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid configuration values:\n" + "\n".join(f"  {p}" for p in self.problems))


@lru_cache(maxsize=1)
def _validator() -> jsonschema.protocols.Validator:
    schema = schemas.addon_configuration_schema()
    return schema_validator(schema, formats=False)


def excerpt(value: Any) -> str:
    """``value`` as an error quotes it: JSON, credentials masked, then cut to :data:`EXCERPT_MAX_CHARS`."""
    text = redact_value(json.dumps(value, default=str, ensure_ascii=False))
    return text if len(text) <= EXCERPT_MAX_CHARS else text[: EXCERPT_MAX_CHARS - 3] + "..."


def _line(problem: Problem, prefix: str = "") -> str:
    path = f"{prefix}{problem.path}" if problem.path else (prefix.rstrip(".") or "(root)")
    return f"{path}: {redact_value(problem.message)} (rule {problem.rule})"


def schema_problems(validator: jsonschema.protocols.Validator, values: Mapping[str, Any]) -> list[str]:
    """Every error ``validator`` finds in ``values`` as ``path: message (rule id)``, values quoted
    as :func:`excerpt` (our chart's schema here, AWS's add-on schema in :mod:`igw.addon.aws_addon`)."""
    collector = ProblemCollector(quote=excerpt)
    for error in validator.iter_errors(values):
        collector.translate(error)
    return [_line(problem) for problem in collector.problems()]


def problems(values: Mapping[str, Any]) -> list[str]:
    """Every problem in ``values`` as ``path: message (rule id)``; empty when EKS would accept them."""
    found = schema_problems(_validator(), values)
    gateway = values.get("gateway")
    config = gateway.get("config") if isinstance(gateway, Mapping) else None
    if not found and isinstance(config, Mapping) and "spec" in config:
        found += [_line(problem, "gateway.config.") for problem in _igwc_problems(config)]
    return found


_TEMPLATE_FAILURE: Final = re.compile(r"execution error at \([^)]*\): (.*)", re.DOTALL)
"""Helm's wording around a template's ``fail`` message (the message names the value's path itself)."""


def render_problems(values: Mapping[str, Any]) -> list[str]:
    """The chart's render-time checks (``templates/_validations.tpl``) on ``values``, one problem each,
    redacted: cross-field rules no schema can state (limits below requests, renewBefore not shorter than
    duration, a management port on the inference port). EKS's ``configurationValues`` check reads only
    the schema, so without this they surfaced as ``CREATE_FAILED`` after the call. Call it on values
    :func:`problems` found nothing in (a schema error is reported there, path-named)."""
    # deferred: optional dependency: helm-python-sdk (ops extra) is needed only to render the chart
    import helm_python as helm

    try:
        chart.render(values)
    except helm.HelmError as exc:
        text = str(exc).strip()
        found = _TEMPLATE_FAILURE.search(text)
        return [redact_value(found.group(1).strip() if found else text)]
    except DocumentReadError as exc:
        # a value repeats a key the template writes itself: Kubernetes would keep one silently
        return [redact_value(f"a value repeats a key the chart sets: {exc}")]
    return []


def operator_mode_problems(values: Mapping[str, Any]) -> list[str]:
    """Values the chart's ``mode: operator`` (the default) never reads, one problem each.

    EKS accepts them (the schema is shared by both modes), and they silently changed nothing:
    ``service.scheme``, ``replicaCount``, ``resources`` or ``podAnnotations`` in ``igw addon create
    --configuration-values`` looked applied. The CDK app already refused them; the CLI now does too.
    ``gateway.workers``, ``gateway.workerTimeoutSeconds`` and ``gateway.cloudWatch`` reach the
    operator's gateways and are accepted (the whole of ``gateway`` was refused, these with it)."""
    if values.get("mode", "operator") != "operator":
        return []
    return [
        f"{path}: has no effect with the chart's mode operator (the operator builds each gateway - its "
        f"replicas, Service, TLS, pods and NetworkPolicy - from its InferenceGatewayConfig; its pods call "
        f"no AWS API){_OPERATOR_MODE_HINTS.get(path, '')}; remove it, or set mode: gateway"
        for path in chart.gateway_mode_only_paths(values)
    ]


_OPERATOR_MODE_HINTS: dict[str, str] = {
    "autoscaling": " - autoscale an operator's gateway with its spec.extensions.dataPlane.autoscaling",
    "resources": (
        " - the operator's own: operator.resources; a config's gateway pods: its spec.podDefaults.resources"
    ),
    "podAnnotations": " - a config's gateway pods: its spec.podDefaults.annotations",
    "podLabels": " - a config's gateway pods: its spec.podDefaults.labels",
    "gateway.extraEnv": (
        " - every operator gateway: operator.gatewayEnv; one config's: its spec.podDefaults.env"
    ),
}
"""Where a gateway-mode value's setting lives in operator mode, where there is such a place."""


def _igwc_problems(config: Mapping[str, Any]) -> list[Problem]:

    document = {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": config.get("name", "default")},
        "spec": config["spec"],
    }
    return validate_document(document)


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
