"""``igw validate FILE...``: check InferenceGatewayConfig, GlobalRouterConfig, InferenceObjective,
InferenceModelRewrite and EndpointPickerConfig files.

An EndpointPickerConfig (the GIE/llm-d plugins file a ``configMapRef`` names) is loaded as the gateway
loads it: unknown plugin types, bad references and bad thresholds are problems; an invalid or unknown
plugin *parameter*, which the gateway (like the reference) replaces by the plugin's default with a
warning, is a warning on stderr, or a problem with ``--strict-plugins``. A ``v1`` ConfigMap whose
``data`` entry holds an EndpointPickerConfig (what a ``configMapRef`` names) has that entry checked the
same way, at its lines in the file.

Prints one line per problem, ``FILE:LINE: PATH: MESSAGE [RULE]``, reporting every problem of every
document; documents of other kinds in the same file are skipped with a note on stderr, except that a
kind unknown to an API group igw owns or reads (``kind: InferenceGatewayconfig``, which ``kubectl
apply`` refuses) is a problem naming the nearest known kind (:mod:`igw.config.kinds`). An AWS field
that igw accepts without using (``logLevel``, ``bbr.replicas`` ...) is a note on stderr naming its
path (:mod:`igw.config.unused_fields`), which leaves the exit code as it was. Exit codes:
0 all valid, 1 at least one problem, 2 a file could not be read or parsed (or bad usage).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from igw.cli.arg_types import source_name

if TYPE_CHECKING:
    from igw.config.documents import SourceDocument
    from igw.config.errors import Problem

HELP = (
    "Validate InferenceGatewayConfig, GlobalRouterConfig, InferenceObjective, InferenceModelRewrite and "
    "EndpointPickerConfig files (YAML, multi-document, or JSON)."
)
PICKER_RULE = "endpoint-picker-config"
PICKER_PARAMETER_RULE = "endpoint-picker-parameter"

EXIT_VALID = 0
EXIT_INVALID = 1
EXIT_UNREADABLE = 2


@dataclass(frozen=True, slots=True)
class Finding:
    file: str
    document: int | None
    line: int | None
    path: str
    message: str
    rule: str

    def text(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        field = f"{self.path}: " if self.path else ""
        return f"{where}: {field}{self.message} [{self.rule}]"

    def as_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "document": self.document,
            "line": self.line,
            "path": self.path,
            "message": self.message,
            "rule": self.rule,
        }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "files", nargs="+", type=source_name, metavar="FILE", help="YAML or JSON files; '-' reads stdin"
    )
    parser.add_argument(
        "--output",
        choices=("text", "json"),
        default="text",
        help="text: one line per problem (default); json: a list of problem objects on stdout",
    )
    parser.add_argument(
        "--strict-plugins",
        action="store_true",
        help="EndpointPickerConfig: an invalid or unknown plugin parameter is a problem (default: a "
        "warning, as the gateway falls back to the plugin's default)",
    )


def _picker_problems(content: Any, *, strict: bool, warn: Callable[[str], None]) -> list[Problem]:
    """An EndpointPickerConfig loaded as the gateway loads it; parameter fallbacks go to ``warn``
    unless ``strict``."""
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.config.errors import Problem
    from igw.scheduling.errors import SchedulerConfigError
    from igw.scheduling.picker_config import load_picker_config
    from igw.scheduling.settings import RoutingSettings

    def split(text: str, rule: str) -> Problem:
        text = text.removeprefix("EndpointPickerConfig: ")
        path, sep, message = text.partition(": ")
        if not sep or " " in path:
            return Problem(path="", message=text, rule=rule)
        return Problem(path=path, message=message, rule=rule)

    # the gateway logs each fallback on igw.scheduling; here they are reported through ``warn``
    quiet = logging.getLogger("igw.scheduling")
    was_disabled, quiet.disabled = quiet.disabled, True
    try:
        _, _, warnings = load_picker_config(content, settings=RoutingSettings(), strict=strict)
    except SchedulerConfigError as exc:
        rule = PICKER_PARAMETER_RULE if strict else PICKER_RULE
        return [split(text, rule if ".parameters" in text else PICKER_RULE) for text in exc.problems]
    finally:
        quiet.disabled = was_disabled
    for text in warnings:
        warn(text.removeprefix("EndpointPickerConfig: "))
    return []


@dataclass(frozen=True, slots=True)
class EmbeddedPicker:
    """An EndpointPickerConfig held as text under a ConfigMap's ``data`` key (or that key's YAML error)."""

    key: str
    key_line: int
    """File line of the ``data`` key."""
    first_line: int | None
    """File line of the text's first line (a literal block scalar, ``key: |``), else ``None``."""
    document: SourceDocument | None
    error: str | None


def _embedded_pickers(doc: SourceDocument) -> list[EmbeddedPicker]:
    """The EndpointPickerConfigs a ``v1`` ConfigMap document holds in ``data`` (the form a
    ``configMapRef`` names), read with the limits the gateway reads them with; an entry that names the
    kind but is not YAML is returned with its error, so a broken plugins file is not skipped."""
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    import yaml

    from igw.config.documents import DocumentReadError, parse_text
    from igw.scheduling.picker_config import KIND as PICKER_KIND

    content = doc.content
    if not isinstance(content, dict) or content.get("kind") != "ConfigMap":
        return []
    data = content.get("data") if content.get("apiVersion") == "v1" else None
    if not isinstance(data, dict):
        return []
    found: list[EmbeddedPicker] = []
    for key, text in data.items():
        if not isinstance(key, str) or not isinstance(text, str) or PICKER_KIND not in text:
            continue
        key_line = doc.line_of(("data", key))
        value = _mapping_value(_mapping_value(doc.node, "data"), key)
        literal = isinstance(value, yaml.ScalarNode) and value.style == "|"
        first_line = value.start_mark.line + 2 if literal and value is not None else None
        source = f"data.{key}"
        try:
            documents = parse_text(text, source=source)
        except DocumentReadError as exc:
            error = str(exc).removeprefix(f"{source}: ")
            found.append(EmbeddedPicker(key, key_line, first_line, None, error))
            continue
        for inner in documents:
            if isinstance(inner.content, dict) and inner.content.get("kind") == PICKER_KIND:
                found.append(EmbeddedPicker(key, key_line, first_line, inner, None))
    return found


def _mapping_value(node: Any, key: str) -> Any:
    """The value node under ``key`` of a YAML mapping node (``None`` when absent or not a mapping)."""
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    import yaml

    if not isinstance(node, yaml.MappingNode):
        return None
    return next((v for k, v in node.value if getattr(k, "value", None) == key), None)


def _embedded_picker_findings(
    name: str, doc: SourceDocument, picker: EmbeddedPicker, notes: list[str], *, strict: bool
) -> list[Finding]:
    """Findings for one ConfigMap-held EndpointPickerConfig, each at its line in the file where the
    text is a literal block (``key: |``), else at the ``data`` key's line."""
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.config.jsonpath import parse_path

    prefix = f"data[{picker.key}]"
    if picker.document is None:
        return [Finding(name, doc.index + 1, picker.key_line, prefix, str(picker.error), PICKER_RULE)]
    inner = picker.document

    def line_of(path: str) -> int:
        if picker.first_line is None:
            return picker.key_line
        inner_line = inner.line_of(parse_path(path)) if path and " " not in path else inner.line
        return picker.first_line + inner_line - 1

    def warn(text: str) -> None:
        path = text.partition(": ")[0]
        where = f"{name}:{line_of(path)}"
        notes.append(f"{where}: warning: {prefix}.{text} (--strict-plugins makes this a problem)")

    problems = _picker_problems(inner.content, strict=strict, warn=warn)
    return [
        Finding(
            name,
            doc.index + 1,
            line_of(problem.path),
            f"{prefix}.{problem.path}" if problem.path else prefix,
            problem.message,
            problem.rule,
        )
        for problem in problems
    ]


def _generated_name_only(content: Any) -> bool:
    """Whether an object's metadata has ``generateName`` and no ``name`` (``kubectl create`` only)."""
    metadata = content.get("metadata") if isinstance(content, dict) else None
    return isinstance(metadata, dict) and "generateName" in metadata and "name" not in metadata


def _check_file(
    name: str, notes: list[str], *, strict_plugins: bool = False
) -> tuple[list[Finding], bool, int, dict[str, int]]:
    """Findings for one file, whether it was readable, how many documents were checked, and how many
    of them were of each kind other than InferenceGatewayConfig."""
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.config.documents import DocumentReadError, read_resources
    from igw.config.inference_extension import is_inference_extension_resource, validate_resource
    from igw.config.jsonpath import parse_path
    from igw.config.kinds import unknown_kind_problem
    from igw.config.unused_fields import note_text, unused_field_notes
    from igw.config.validate import is_gateway_config, validate_document
    from igw.global_router.schema import is_global_router_config, validate_global_document
    from igw.scheduling.picker_config import KIND as PICKER_KIND

    try:
        documents = read_resources(name)
    except DocumentReadError as exc:
        message = str(exc).removeprefix(f"{name}: ")
        return [Finding(name, None, None, "", message, "unreadable")], False, 0, {}
    findings: list[Finding] = []
    checked = 0
    others: dict[str, int] = {}
    for doc in documents:
        validate: Callable[[Any], list[Problem]]
        if is_global_router_config(doc.content):
            validate = validate_global_document
        elif is_inference_extension_resource(doc.content):
            validate = validate_resource
        elif is_gateway_config(doc.content):
            validate = validate_document
        elif isinstance(doc.content, dict) and doc.content.get("kind") == PICKER_KIND:

            def validate(content: Any, doc: Any = doc) -> list[Problem]:
                def warn(text: str) -> None:
                    path = text.partition(": ")[0]
                    line = doc.line_of(parse_path(path)) if " " not in path else doc.line
                    notes.append(f"{name}:{line}: warning: {text} (--strict-plugins makes this a problem)")

                return _picker_problems(content, strict=strict_plugins, warn=warn)
        elif embedded := _embedded_pickers(doc):
            # a ConfigMap holding the EndpointPickerConfig a configMapRef names (kubectl applies it
            # beside the InferenceGatewayConfig): its plugins are checked as the gateway loads them
            for picker in embedded:
                findings.extend(_embedded_picker_findings(name, doc, picker, notes, strict=strict_plugins))
            checked += len(embedded)
            others[PICKER_KIND] = others.get(PICKER_KIND, 0) + len(embedded)
            continue
        elif (unknown := unknown_kind_problem(doc.content)) is not None:
            # a kind its API group (one igw owns or reads) does not hold: kubectl apply fails on it
            line = doc.line_of(("kind",))
            findings.append(Finding(name, doc.index + 1, line, unknown.path, unknown.message, unknown.rule))
            continue
        else:
            kind = doc.content.get("kind") if isinstance(doc.content, dict) else None
            what = f"kind {kind}" if kind else f"a {type(doc.content).__name__}, no kind"
            notes.append(f"{name}:{doc.line}: note: skipped document {doc.index + 1} ({what})")
            continue
        checked += 1
        if validate is validate_document and _generated_name_only(doc.content):
            notes.append(
                f"{name}:{doc.line_of(('metadata',))}: note: document {doc.index + 1} has "
                "metadata.generateName and no metadata.name: valid for kubectl create; kubectl apply "
                "and igw serve --config need a name"
            )
        if validate is not validate_document:
            others[str(doc.content["kind"])] = others.get(str(doc.content["kind"]), 0) + 1
        else:
            placed = [(doc.line_of(parse_path(u.path)), u) for u in unused_field_notes(doc.content)]
            for line, unused in sorted(placed, key=lambda item: item[0]):
                notes.append(f"{name}:{line}: note: {note_text(unused)}")
        located = [(doc.line_of(parse_path(p.path)), p) for p in validate(doc.content)]
        for line, problem in sorted(located, key=lambda item: item[0]):
            findings.append(Finding(name, doc.index + 1, line, problem.path, problem.message, problem.rule))
    return findings, True, checked, others


def run(args: argparse.Namespace) -> int:
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.config.schema import SchemaError

    try:
        return _run(args)
    except SchemaError as exc:
        print(f"igw validate: the contract in schemas/ is broken: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE


def _run(args: argparse.Namespace) -> int:
    findings: list[Finding] = []
    notes: list[str] = []
    unreadable = False
    total = 0
    others: dict[str, int] = {}
    for name in args.files:
        file_findings, readable, checked, file_others = _check_file(
            name, notes, strict_plugins=args.strict_plugins
        )
        for kind, count in file_others.items():
            others[kind] = others.get(kind, 0) + count
        findings.extend(file_findings)
        unreadable = unreadable or not readable
        total += checked
        if readable and checked == 0:
            notes.append(f"{name}: note: no InferenceGatewayConfig document in this file")
    for note in notes:
        print(note, file=sys.stderr)
    if args.output == "json":
        print(json.dumps([finding.as_json() for finding in findings], indent=2))
    else:
        for finding in findings:
            print(finding.text())
        problems = sum(1 for f in findings if f.rule != "unreadable")
        configs = total - sum(others.values())
        counted = [f"{configs} InferenceGatewayConfig document(s)"] if configs or not others else []
        counted += [f"{count} {kind} document(s)" for kind, count in sorted(others.items())]
        print(
            " and ".join(counted)
            + f" checked, {problems} problem(s)"
            + (", some files unreadable" if unreadable else ""),
            file=sys.stderr,
        )
    if unreadable:
        return EXIT_UNREADABLE
    return EXIT_INVALID if findings else EXIT_VALID
