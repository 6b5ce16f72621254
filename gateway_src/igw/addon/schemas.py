"""Generators for the add-on's derived files, all from ``schemas/`` (the single source of truth).

Three outputs, each registered as one line in :mod:`igw.config.generated_files` so that
``igw generate`` writes them and its freshness check fails when a committed copy is stale:

- ``addon/chart/inference-gateway/values.schema.json`` — Helm validates every install against it;
- ``addon/configuration-schema.json`` — the JSON Schema (draft-06, closed) that EKS returns from
  ``describe-addon-configuration`` and validates ``configurationValues`` against;
- ``addon/chart/inference-gateway/templates/crd-inferencegatewayconfigs.yaml`` — the CRD (as
  :func:`igw.config.crd.build_crd` generates it for ``crds/``) wrapped as a gated template
  (``crds.enabled``; ``crds.keep`` keeps it on uninstall), and the two reference CRDs
  (InferenceObjective, InferenceModelRewrite) for operator mode, which ``crds.inferenceExtension.enabled``
  can leave out on its own.

The chart-level shape (replicas, image, service, …) lives in ``chart_values.schema.json`` beside this
module; ``gateway.config.spec`` is the InferenceGatewayConfig ``spec`` schema (extensions attached,
references inlined), converted to draft-06 because the EKS API speaks draft-06. A keyword draft-06
cannot express makes generation fail loudly rather than silently weakening validation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from igw.addon import pins
from igw.config import crd, inference_extension, inference_extension_crds, paths, schema
from igw.errors import IgwToolingError

DRAFT_06: Final = "http://json-schema.org/draft-06/schema#"
DRAFT_07: Final = "http://json-schema.org/draft-07/schema#"
SPEC_DEFINITION: Final = "InferenceGatewayConfigSpec"
ROOT_DEFINITION: Final = "InferenceGateway"

CHART_DIR: Final = Path("addon") / "chart" / pins.CHART_NAME
VALUES_SCHEMA_FILE: Final = CHART_DIR / "values.schema.json"
CONFIGURATION_SCHEMA_FILE: Final = Path("addon") / "configuration-schema.json"
CRD_TEMPLATE_FILE: Final = CHART_DIR / "templates" / "crd-inferencegatewayconfigs.yaml"
OBJECTIVE_CRD_TEMPLATE_FILE: Final = CHART_DIR / "templates" / "crd-inferenceobjectives.yaml"
REWRITE_CRD_TEMPLATE_FILE: Final = CHART_DIR / "templates" / "crd-inferencemodelrewrites.yaml"
_SKELETON: Final = Path(__file__).resolve().parent / "chart_values.schema.json"

_UNSUPPORTED_IN_DRAFT_06: Final = frozenset(
    {
        "if",
        "then",
        "else",
        "dependentRequired",
        "dependentSchemas",
        "prefixItems",
        "unevaluatedProperties",
        "unevaluatedItems",
        "$ref",
        "$defs",
        "$anchor",
        "$dynamicRef",
        "$dynamicAnchor",
        "minContains",
        "maxContains",
        "contentMediaType",
        "contentEncoding",
    }
)
_DROPPED: Final = frozenset({"$schema", "$id", "$comment"})
_KEPT_ANNOTATIONS: Final = frozenset({"x-igw-hint"})
"""``x-*`` annotations kept: a pattern's hint is what ``igw addon``'s check prints for a refused
``gateway.config.spec`` value (without it, the regular expression); Helm and EKS ignore the keyword."""


class SchemaGenerationError(IgwToolingError, RuntimeError):
    """The source schemas cannot be turned into the add-on's schemas (names the JSON path)."""


def to_draft06(node: Any, *, where: str = "spec") -> Any:
    """Rewrite an inlined 2020-12 schema node into draft-06; ``x-*`` annotations are dropped, but for
    :data:`_KEPT_ANNOTATIONS`."""
    if isinstance(node, list):
        return [to_draft06(item, where=f"{where}[{i}]") for i, item in enumerate(node)]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _UNSUPPORTED_IN_DRAFT_06:
            raise SchemaGenerationError(
                f"{where}.{key}: keyword not expressible here in JSON Schema draft-06"
            )
        if key in _DROPPED or (key.startswith("x-") and key not in _KEPT_ANNOTATIONS):
            continue
        if key in ("properties", "patternProperties"):
            out[key] = {name: to_draft06(sub, where=f"{where}.{name}") for name, sub in value.items()}
        else:
            out[key] = to_draft06(value, where=f"{where}.{key}")
    return out


def _spec_schema(schemas_dir: Path | None) -> dict[str, Any]:
    resolved = schema.resolved_schema(schemas_dir)
    try:
        spec = resolved["properties"]["spec"]
    except KeyError as exc:
        raise SchemaGenerationError(f"{paths.MAIN_SCHEMA_FILE}: no properties.spec") from exc
    converted: dict[str, Any] = to_draft06(spec)
    return converted


def _skeleton() -> tuple[dict[str, Any], dict[str, Any]]:
    """The chart-level schema and its definitions, separated."""
    skeleton: dict[str, Any] = json.loads(_SKELETON.read_text(encoding="utf-8"))
    skeleton.pop("$comment", None)
    definitions: dict[str, Any] = skeleton.pop("definitions")
    return skeleton, definitions


def chart_values_schema(*, schemas_dir: Path | None = None) -> dict[str, Any]:
    """The chart's ``values.schema.json`` (draft-07 for Helm; only draft-06 keywords inside)."""
    skeleton, definitions = _skeleton()
    definitions[SPEC_DEFINITION] = _spec_schema(schemas_dir)
    return {"$schema": DRAFT_07, **skeleton, "definitions": dict(sorted(definitions.items()))}


def addon_configuration_schema(*, schemas_dir: Path | None = None) -> dict[str, Any]:
    """The EKS add-on configuration schema: draft-06, closed, in the shape EKS returns for AWS add-ons."""
    skeleton, definitions = _skeleton()
    definitions[SPEC_DEFINITION] = _spec_schema(schemas_dir)
    definitions[ROOT_DEFINITION] = skeleton
    return {
        "$ref": f"#/definitions/{ROOT_DEFINITION}",
        "$schema": DRAFT_06,
        "definitions": dict(sorted(definitions.items())),
    }


def _json_text(document: Mapping[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def render_values_schema(root: Path) -> str:
    """Generator for ``values.schema.json`` (registry signature: repository root -> text)."""
    return _json_text(chart_values_schema(schemas_dir=root / "schemas"))


def render_configuration_schema(root: Path) -> str:
    """Generator for ``addon/configuration-schema.json``."""
    return _json_text(addon_configuration_schema(schemas_dir=root / "schemas"))


def chart_crd_template(
    document: Mapping[str, Any], source: str, condition: str = ".Values.crds.enabled"
) -> str:
    """A CRD as a chart template rendered when ``condition`` holds (kept on uninstall with ``crds.keep``)."""
    body = yaml.safe_dump({"spec": document["spec"]}, sort_keys=False, width=100, allow_unicode=True)
    if "{{" in body or "}}" in body:
        raise SchemaGenerationError("the CRD contains '{{' or '}}', which Helm would read as a template")
    lines = [
        f"# Generated by `igw generate` from schemas/ (the same CRD as {source}); do not edit.",
        f"{{{{- if {condition} }}}}",
        f"apiVersion: {document['apiVersion']}",
        f"kind: {document['kind']}",
        "metadata:",
        f"  name: {document['metadata']['name']}",
        "  labels:",
        '    {{- include "igw.labels" . | nindent 4 }}',
        "  {{- if .Values.crds.keep }}",
        "  annotations:",
        "    helm.sh/resource-policy: keep",
        "  {{- end }}",
        body.rstrip("\n"),
        "{{- end }}",
    ]
    return "\n".join(lines) + "\n"


def render_crd_template(root: Path) -> str:
    """Generator for the chart's CRD template: the CRD of ``crds/``, gated by ``crds.enabled``."""
    return chart_crd_template(crd.build_crd(root / "schemas"), crd.CRD_PATH)


OPERATOR_CRDS: Final = (
    '(and .Values.crds.enabled .Values.crds.inferenceExtension.enabled (eq .Values.mode "operator"))'
)
"""The InferenceObjective / InferenceModelRewrite CRDs only serve the operator: gateway mode has none.
``crds.inferenceExtension.enabled: false`` leaves them out while ``crds.enabled`` still installs the
InferenceGatewayConfig CRD, for a cluster that already has them from the reference's own install
(two installers of one CRD would fight over it); ``crds.enabled: false`` leaves out all three."""


def _operator_crd_template(kind: str, root: Path) -> str:
    document = inference_extension_crds.build_crd(kind, root / "schemas")
    return chart_crd_template(document, inference_extension_crds.crd_path(kind), OPERATOR_CRDS)


def render_objective_crd_template(root: Path) -> str:
    """Generator for the chart's InferenceObjective CRD template."""
    return _operator_crd_template(inference_extension.OBJECTIVE_KIND, root)


def render_rewrite_crd_template(root: Path) -> str:
    """Generator for the chart's InferenceModelRewrite CRD template."""
    return _operator_crd_template(inference_extension.REWRITE_KIND, root)


GENERATORS: Final[tuple[tuple[str, str], ...]] = (
    (str(VALUES_SCHEMA_FILE), "igw.addon.schemas:render_values_schema"),
    (str(CONFIGURATION_SCHEMA_FILE), "igw.addon.schemas:render_configuration_schema"),
    (str(CRD_TEMPLATE_FILE), "igw.addon.schemas:render_crd_template"),
    (str(OBJECTIVE_CRD_TEMPLATE_FILE), "igw.addon.schemas:render_objective_crd_template"),
    (str(REWRITE_CRD_TEMPLATE_FILE), "igw.addon.schemas:render_rewrite_crd_template"),
)
"""The entries this module contributes to :data:`igw.config.generated_files.GENERATED_FILES`."""
