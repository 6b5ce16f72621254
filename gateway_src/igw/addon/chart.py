"""The add-on chart through Helm's own Go SDK (helm-python-sdk): render, lint, package, and the EKS
add-on rules scan. No helm binary is needed; this is real Helm, not a re-implementation."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from igw.addon import pins, schemas
from igw.config import paths
from igw.config.documents import MANIFEST_LIMITS, parse_text

FORBIDDEN_PATTERNS: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    ("helm hook (helm.sh/hook)", re.compile(r"helm\.sh/hook")),
    ("lookup function", re.compile(r"\blookup\b")),
    (".Capabilities", re.compile(r"\.Capabilities\b")),
    (".Release field other than Name/Namespace", re.compile(r"\.Release\.(?!Name\b|Namespace\b)[A-Za-z]+")),
)
"""What the EKS add-on packaging rules forbid in templates (AWS's validator codes E501-E507)."""

GATEWAY_MODE_ONLY_VALUES: Final = (
    "replicaCount",
    "autoscaling",
    "gateway.port",
    "gateway.managementPort",
    "gateway.logLevel",
    "gateway.extraArgs",
    "gateway.extraEnv",
    "gateway.config",
    "service",
    "certManager",
    "serviceAccount",
    "resources",
    "terminationGracePeriodSeconds",
    "preStopSleepSeconds",
    "podAntiAffinity",
    "priorityClassName",
    "podAnnotations",
    "podLabels",
    "podDisruptionBudget",
    "rbac",
    "networkPolicy.modelServerPorts",
)
"""Values (dotted paths) that only ``mode: gateway`` reads: with ``mode: operator`` the chart renders the
same objects whatever they say (the operator takes replicas, Service, TLS, pod settings and network
policy from each InferenceGatewayConfig, and its gateway pods run as ``<name>-gateway`` in the object's
namespace). ``gateway.workers``, ``gateway.workerTimeoutSeconds`` and ``gateway.cloudWatch`` are not
here: the operator hands them to every gateway it runs, nor are ``networkPolicy.ingressCidrs`` (the
sources the operator's gateway NetworkPolicies admit; refused in operator mode before session s41,
while those NetworkPolicies admitted every source) and ``networkPolicy.extraEgress`` (rules added to
each of them, ``igw operator --gateway-extra-egress``; refused before session s41, so a destination
of the cluster's, a NodeLocal DNSCache or an HTTPS proxy, could not be opened)."""


def gateway_mode_only_paths(values: Mapping[str, Any]) -> list[str]:
    """The :data:`GATEWAY_MODE_ONLY_VALUES` that ``values`` sets, in that order."""
    found: list[str] = []
    for path in GATEWAY_MODE_ONLY_VALUES:
        node: Any = values
        for key in path.split("."):
            if not isinstance(node, Mapping) or key not in node:
                break
            node = node[key]
        else:
            found.append(path)
    return found


@dataclass(frozen=True, slots=True)
class RuleViolation:
    file: str
    line: int
    rule: str
    text: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.rule}: {self.text.strip()}"


def chart_dir(root: Path | None = None) -> Path:
    return (root or paths.REPO_ROOT) / schemas.CHART_DIR


def render(
    values: Mapping[str, Any] | None = None,
    *,
    release: str = pins.CHART_NAME,
    namespace: str = pins.ADDON_NAMESPACE,
    directory: Path | None = None,
) -> list[dict[str, Any]]:
    """Every object the chart renders for ``values`` (Helm validates them against values.schema.json).

    Raises :class:`~igw.config.documents.DocumentReadError` when a rendered manifest holds a mapping
    key twice (its message names the template, the line and the key)."""
    # deferred: optional dependency: helm-python-sdk (ops extra) is needed only to render the chart
    import helm_python as helm

    chart = helm.Chart.load(str(directory or chart_dir()))
    try:
        rendered = chart.render(dict(values or {}), name=release, namespace=namespace)
    finally:
        chart.close()
    objects: list[dict[str, Any]] = []
    for path, text in sorted(rendered.items()):
        if not path.endswith((".yaml", ".yml")):
            continue
        # A key written twice (a value repeating one the template sets) is refused, not decoded
        # last-one-wins as yaml.safe_load, Helm and kubectl do: there the value silently replaced
        # the chart's own (service.annotations over service.scheme), and tests saw only the winner.
        documents = parse_text(text, source=path, limits=MANIFEST_LIMITS, field_lines=False)
        objects.extend(doc.content for doc in documents if isinstance(doc.content, dict))
    return objects


def lint(
    values: Mapping[str, Any] | None = None, *, kube_version: str | None = None, directory: Path | None = None
) -> dict[str, Any]:
    """``helm lint --strict`` as data (``errors`` and ``messages``)."""
    # deferred: optional dependency: helm-python-sdk (ops extra) is needed only to render the chart
    import helm_python as helm

    result: dict[str, Any] = helm.lint(
        str(directory or chart_dir()), dict(values or {}), strict=True, kube_version=kube_version
    )
    return result


CHART_ENTRIES: Final = (
    "Chart.yaml",
    "Chart.lock",
    "values.yaml",
    "values.schema.json",
    "README.md",
    "LICENSE",
    ".helmignore",
    "templates",
    "files",
    "crds",
    "charts",
)
"""What a chart directory's top level may bring into the archive (Helm's own layout): anything else
there (a ``values-prod.yaml`` with a password, a scratch file) stays out."""

ARCHIVE_FILE_TIME: Final = 315_532_800
"""Modification time of every file in the archive (1980-01-01T00:00:00Z, the zip epoch wheels use):
Helm writes each file's own time into the tar headers, so two checkouts of the same commit packaged
different bytes (another sha256, another OCI digest for the same chart version)."""


def package(*, destination: Path, directory: Path | None = None) -> Path:
    """The chart as ``<name>-<version>.tgz`` in ``destination``: the same bytes for the same chart files,
    whenever and wherever they were checked out.

    Helm packages a staged copy holding only :data:`CHART_ENTRIES` (minus ``.helmignore``'s patterns,
    which Helm applies), every file and folder dated :data:`ARCHIVE_FILE_TIME`."""
    # deferred: optional dependency: helm-python-sdk (ops extra) is needed only to render the chart
    import helm_python as helm

    source = directory or chart_dir()
    destination.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="igw-chart-") as scratch:
        staged = Path(scratch) / source.name
        staged.mkdir()
        for name in CHART_ENTRIES:
            entry = source / name
            if entry.is_dir():
                shutil.copytree(entry, staged / name)
            elif entry.is_file():
                shutil.copyfile(entry, staged / name)
        for path in sorted(staged.rglob("*"), reverse=True):
            os.utime(path, (ARCHIVE_FILE_TIME, ARCHIVE_FILE_TIME))
        os.utime(staged, (ARCHIVE_FILE_TIME, ARCHIVE_FILE_TIME))
        return Path(helm.package(str(staged), destination=str(destination.resolve())))


def addon_rule_violations(directory: Path | None = None) -> list[RuleViolation]:
    """Scan templates and Chart.yaml for what EKS add-ons may not use (hooks, lookup, .Capabilities, other
    .Release fields, unvendored dependencies)."""
    base = directory or chart_dir()
    found: list[RuleViolation] = []
    for file in sorted((base / "templates").rglob("*")):
        if not file.is_file():
            continue
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
            code = line.split("#", 1)[0] if file.suffix in (".yaml", ".yml") else line
            for rule, pattern in FORBIDDEN_PATTERNS:
                if pattern.search(code):
                    found.append(RuleViolation(str(file.relative_to(base)), number, rule, line))
    metadata = yaml.safe_load((base / "Chart.yaml").read_text(encoding="utf-8"))
    for dependency in metadata.get("dependencies") or []:
        repository = str(dependency.get("repository", ""))
        if not repository.startswith("file://"):
            found.append(
                RuleViolation(
                    "Chart.yaml", 0, "unvendored dependency", f"{dependency.get('name')} from {repository!r}"
                )
            )
    return found
