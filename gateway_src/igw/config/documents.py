"""Read configuration files: YAML (several documents per file) or JSON (one value or a stream of them).

A YAML syntax error is reported with its line and column (``line 7, column 3: mapping values are
not allowed in this context``), never as a traceback. YAML is parsed by libyaml where PyYAML has it
(linear; PyYAML's pure-Python scanner is quadratic in flow nesting), JSON by ``json``; a key given
twice is refused in both. Nesting and the expanded size are capped (:class:`ShapeLimits`): Python's
parsers and validators recurse, and a file nested a hundred thousand levels deep ended ``igw
validate`` in a ``RecursionError`` traceback and silently stopped the gateway's hot reload; nested
YAML aliases would make every later step walk billions of values. Each document keeps the line it
starts on so that ``igw validate`` can say which document of a multi-document file a problem belongs
to.

The one reader of YAML/JSON files that a user or a cluster hands in: configuration
(:data:`CONFIG_LIMITS`) and the manifests and templates ``igw audit`` / ``igw preflight`` read
(:data:`MANIFEST_LIMITS`). Until session s37 the checks had a loader of their own (PyYAML's
pure-Python parser, an alias count): the same file was refused by the two with different limits and
messages, a deep one by the checks as "maximum recursion depth exceeded", and a key given twice was
read there as its last value (``kubectl`` refuses such a file).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import yaml

from igw.errors import IgwConfigError


@dataclass(frozen=True, slots=True)
class ShapeLimits:
    """How deep and how large one document may be."""

    max_nesting: int
    """Deepest nesting of mappings and lists."""
    max_values: int
    """Most values (mappings, lists and scalars) once YAML aliases are expanded: what every later
    step walks."""


MAX_NESTING = 64
"""Deepest nesting of mappings and lists accepted in a configuration document (the deepest real
InferenceGatewayConfig field is about a dozen levels down)."""
MAX_EXPANDED_NODES = 1_000_000
"""Most values (mappings, lists and scalars) a configuration document may hold once YAML aliases are
expanded: what every later step (schema validation, the runtime build) walks."""
CONFIG_LIMITS: Final = ShapeLimits(max_nesting=MAX_NESTING, max_values=MAX_EXPANDED_NODES)
"""The limits of an InferenceGatewayConfig, GlobalRouterConfig, picker config or endpoints file."""
MANIFEST_LIMITS: Final = ShapeLimits(max_nesting=256, max_values=2_000_000)
"""The limits of a Kubernetes manifest or CloudFormation template read by the checks: a
CustomResourceDefinition's schema nests two levels per level of its objects, so a deep CRD passes 64
(256 stays well inside Python's recursion limit, which the checks' walks and ``json`` need), and a
rendered chart of CRDs holds more values than a configuration."""


MAX_DOCUMENTS = 100_000
"""Most documents (YAML documents, or values of a JSON stream) read from one text: a 16 MiB file of
``{}`` is eight million JSON values, which took minutes to read; a real file holds at most thousands
(``kubectl get -o yaml`` of many objects writes one ``List``)."""


def _too_many_documents() -> str:
    return f"more than {MAX_DOCUMENTS:,} documents"


MAX_FILE_BYTES = 16 * 2**20
"""Largest configuration file read (16 MiB): a real InferenceGatewayConfig is a few KB, a ConfigMap at
most 1 MiB, an endpoints file for a thousand pods about 100 KB."""


class DocumentReadError(IgwConfigError, ValueError):
    """The file cannot be read or parsed; the message names the file and, for syntax, the line."""


def _shape_problem(content: Any, limits: ShapeLimits) -> str | None:
    """Why ``content`` is refused for its shape, or ``None``: nested deeper than the limits allow,
    more values than they allow once YAML aliases are expanded, or an alias cycle.

    Post-order and iterative (no recursion); each shared container is measured once, so a "billion
    laughs" file of nested aliases costs its own size, not its expansion.
    """
    measured: dict[int, tuple[int, int]] = {}  # id -> (depth, expanded values)
    in_progress: set[int] = set()
    stack: list[tuple[Any, bool]] = [(content, False)]
    while stack:
        value, children_done = stack.pop()
        if not isinstance(value, dict | list) or (not children_done and id(value) in measured):
            continue
        children = list(value.values()) if isinstance(value, dict) else value
        if not children_done:
            if id(value) in in_progress:
                return "an alias refers to a value that contains it"
            in_progress.add(id(value))
            stack.append((value, True))
            stack.extend((child, False) for child in children)
            continue
        depth, size = 1, 1
        for child in children:
            if isinstance(child, dict | list):
                if id(child) in in_progress and id(child) not in measured:
                    return "an alias refers to a value that contains it"
                child_depth, child_size = measured[id(child)]
                depth, size = max(depth, child_depth + 1), size + child_size
            else:
                size += 1
        if depth > limits.max_nesting:
            return _too_deep(limits)
        if size > limits.max_values:
            return f"more than {limits.max_values:,} values once its aliases are expanded"
        measured[id(value)] = (depth, size)
        in_progress.discard(id(value))
    return None


def _too_deep(limits: ShapeLimits) -> str:
    return f"nested deeper than {limits.max_nesting} levels"


def _shape_error(source: str, problem: str) -> DocumentReadError:
    return DocumentReadError(f"{source}: {problem}")


@dataclass(frozen=True, slots=True)
class SourceDocument:
    index: int
    """Position in the file, from 0."""
    line: int
    """Line the document starts on, from 1."""
    content: Any
    node: yaml.Node | None = field(default=None, compare=False, repr=False)
    """The YAML node tree (``None`` for JSON), used to find the line of a field."""

    def line_of(self, parts: Sequence[str | int]) -> int:
        """Line (from 1) of the field at ``parts``, or of its nearest existing ancestor."""
        node = self.node
        line = self.line
        for part in parts:
            if isinstance(node, yaml.MappingNode):
                node = next((v for k, v in node.value if getattr(k, "value", None) == part), None)
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
            else:
                node = None
            if node is None:
                break
            line = node.start_mark.line + 1
        return line


def _yaml_error_text(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{problem}" + (f" ({context})" if context else "")


if TYPE_CHECKING:
    _SafeLoader = yaml.SafeLoader
else:
    # libyaml's parser where PyYAML has it (its wheels do): PyYAML's pure-Python scanner is quadratic
    # in flow nesting (it re-walks every open ``[``/``{`` per token): a 20 KB line of ``[`` took
    # ~10 s of CPU to refuse, a 1 MiB ConfigMap (read by the operator on every pass) far longer.
    # libyaml is linear and stops at its own nesting limit.
    _SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(_SafeLoader):
    """SafeLoader that rejects duplicate keys instead of silently keeping the last one."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, (str, int, float, bool)) and key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key) if isinstance(key, (str, int, float, bool)) else None
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class _DuplicateJsonKey(DocumentReadError):
    """Raised from ``json``'s object hook, turned into a :class:`DocumentReadError` with the key's line."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a key given twice: ``json`` silently kept the last value (a second
    ``"spec"`` replaced the first whole), where a YAML file with the same mistake was refused."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateJsonKey(key)
        out[key] = value
    return out


def _duplicate_key_position(node: yaml.Node | None, key: str) -> str:
    """``line L, column C: `` of the second ``key`` in the first mapping that repeats it, or ``""``."""
    pending = [node] if node is not None else []
    while pending:
        current = pending.pop()
        if isinstance(current, yaml.MappingNode):
            seen = False
            for key_node, value_node in current.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
                    if seen:
                        return (
                            f"line {key_node.start_mark.line + 1}, column {key_node.start_mark.column + 1}: "
                        )
                    seen = True
                pending.append(value_node)
        elif isinstance(current, yaml.SequenceNode):
            pending.extend(current.value)
    return ""


def _json_node_tree(text: str) -> yaml.Node | None:
    """Node tree of a JSON text, only to find field lines (JSON is parsed by ``json`` itself).

    JSON is (nearly) YAML flow syntax, so the YAML composer yields positions; where it disagrees
    (rare escapes), lines fall back to the document start.
    """
    try:
        return yaml.compose(text, Loader=_SafeLoader)
    except yaml.YAMLError:
        return None


def _parse_json_stream(
    text: str, *, source: str, limits: ShapeLimits, field_lines: bool
) -> list[SourceDocument]:
    """The JSON values of ``text``, one document each: one value, or several back to back (a JSON
    stream, ``{...}{...}`` or one per line, which ``kubectl apply -f`` reads as several objects).

    Until session s39 a stream was refused as ``line 2, column 1: Extra data``. Each value keeps the
    line it starts on, and its node tree (composed from its own text, then moved to where the value
    is in the file) gives its fields' lines in the file. The shape limits hold for each value. Lines
    are counted once over the text, so a stream of many small values stays linear.
    """
    decoder = json.JSONDecoder(object_pairs_hook=_unique_json_object)
    documents: list[SourceDocument] = []
    position = _skip_json_space(text, 0)
    line, counted_to, line_start = 1, 0, 0
    while position < len(text):
        if len(documents) == MAX_DOCUMENTS:
            raise _shape_error(source, _too_many_documents())
        line += text.count("\n", counted_to, position)
        if (last_break := text.rfind("\n", counted_to, position)) >= 0:
            line_start = last_break + 1
        counted_to, column = position, position - line_start
        try:
            content, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            raise DocumentReadError(f"{source}: line {exc.lineno}, column {exc.colno}: {exc.msg}") from exc
        except RecursionError:
            raise _shape_error(source, _too_deep(limits)) from None
        except _DuplicateJsonKey as exc:
            # the value's end, read again without the duplicate check, to find the key's line
            _, end = json.JSONDecoder().raw_decode(text, position)
            node = _moved(_json_node_tree(text[position:end]), line - 1, column)
            raise DocumentReadError(
                f"{source}: {_duplicate_key_position(node, exc.key)}duplicate key {exc.key!r}"
            ) from None
        if (problem := _shape_problem(content, limits)) is not None:
            raise _shape_error(source, problem)
        node = None
        if field_lines:
            try:
                node = _moved(_json_node_tree(text[position:end]), line - 1, column)
            except RecursionError:
                node = None
        documents.append(SourceDocument(index=len(documents), line=line, content=content, node=node))
        position = _skip_json_space(text, end)
    return documents


def _skip_json_space(text: str, position: int) -> int:
    """The position of the first character from ``position`` that is not JSON whitespace."""
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


def _moved(root: yaml.Node | None, lines: int, column: int) -> yaml.Node | None:
    """``root`` (composed from a value's own text) with every mark moved down ``lines`` lines, and
    right ``column`` columns on the value's first line: the marks of the value where it is in the
    file. Iterative; each node once."""
    if root is None or (lines == 0 and column == 0):
        return root
    pending: list[yaml.Node] = [root]
    seen: set[int] = set()
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for attribute in ("start_mark", "end_mark"):
            mark = getattr(node, attribute, None)
            if mark is not None:
                shift = column if mark.line == 0 else 0
                setattr(
                    node,
                    attribute,
                    yaml.Mark(mark.name, mark.index, mark.line + lines, mark.column + shift, None, 0),
                )
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                pending.extend((key, value))
        elif isinstance(node, yaml.SequenceNode):
            pending.extend(node.value)
    return root


def parse_text(
    text: str, *, source: str, limits: ShapeLimits = CONFIG_LIMITS, field_lines: bool = True
) -> list[SourceDocument]:
    """Parse ``text`` as JSON (when it starts with ``{`` or ``[``: one value or a stream of them,
    :func:`_parse_json_stream`) or multi-document YAML.

    Empty YAML documents (``---`` with nothing after it) are dropped. ``field_lines``: keep a JSON
    document's node tree for :meth:`SourceDocument.line_of` (a second parse of the text; a caller
    that needs no field's line, such as the checks reading a large CloudFormation template, skips
    it).
    """
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        return _parse_json_stream(text, source=source, limits=limits, field_lines=field_lines)
    documents: list[SourceDocument] = []
    try:
        loader = _UniqueKeyLoader(text)
        try:
            index = 0
            while loader.check_node():
                node = loader.get_node()
                if node is None:
                    continue
                content = loader.construct_document(node)
                if (problem := _shape_problem(content, limits)) is not None:
                    raise _shape_error(source, problem)
                if content is not None:
                    documents.append(
                        SourceDocument(index=index, line=node.start_mark.line + 1, content=content, node=node)
                    )
                index += 1
                if index > MAX_DOCUMENTS:
                    raise _shape_error(source, _too_many_documents())
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(getattr(exc, "problem", "")):  # libyaml's own limit
            raise _shape_error(source, _too_deep(limits)) from None
        raise DocumentReadError(f"{source}: {_yaml_error_text(exc)}") from exc
    except RecursionError:
        raise _shape_error(source, _too_deep(limits)) from None
    return documents


def parse_one(
    text: str, *, source: str, limits: ShapeLimits = CONFIG_LIMITS, field_lines: bool = True
) -> SourceDocument:
    """:func:`parse_text` for a text that must hold exactly one document (a CloudFormation template,
    a JSON value): ``DocumentReadError`` naming how many it holds otherwise."""
    documents = parse_text(text, source=source, limits=limits, field_lines=field_lines)
    if len(documents) != 1:
        raise DocumentReadError(f"{source}: one document expected, found {len(documents)}")
    return documents[0]


def read_documents(path: str | Path) -> list[SourceDocument]:
    """Read and parse one file (``-`` is standard input); ``DocumentReadError`` if unreadable or malformed."""
    return parse_text(read_text(path), source=str(path))


def is_list_document(content: Any) -> bool:
    """Whether ``content`` is a Kubernetes list (``kind: List`` or ``<Kind>List`` holding ``items``),
    the form ``kubectl get -o yaml`` writes and ``kubectl apply -f`` accepts."""
    return (
        isinstance(content, dict)
        and isinstance(content.get("kind"), str)
        and content["kind"].endswith("List")
        and isinstance(content.get("items"), list)
    )


def expand_lists(documents: Sequence[SourceDocument]) -> list[SourceDocument]:
    """``documents`` with every Kubernetes list replaced by its items, in order (nested lists too).

    ``kubectl apply -f`` applies each item of a list; until session s39 ``igw validate`` skipped a
    list as "kind List" (a list holding a broken InferenceGatewayConfig exited 0, nothing checked) and
    ``igw serve`` found "no InferenceGatewayConfig document". An item keeps its list's document index
    and starts at its own line; its node is the item's, so a problem's line is the field's own.
    """
    out: list[SourceDocument] = []
    pending = list(reversed(documents))
    while pending:
        document = pending.pop()
        if not is_list_document(document.content):
            out.append(document)
            continue
        items_node = None
        if isinstance(document.node, yaml.MappingNode):
            items_node = next(
                (v for k, v in document.node.value if getattr(k, "value", None) == "items"), None
            )
        nodes = items_node.value if isinstance(items_node, yaml.SequenceNode) else []
        expanded = []
        for position, item in enumerate(document.content["items"]):
            node = nodes[position] if position < len(nodes) else None
            line = node.start_mark.line + 1 if node is not None else document.line
            expanded.append(SourceDocument(index=document.index, line=line, content=item, node=node))
        pending.extend(reversed(expanded))
    return out


def read_resources(path: str | Path) -> list[SourceDocument]:
    """:func:`read_documents` for files of Kubernetes objects: lists are expanded into their items
    (:func:`expand_lists`), as ``kubectl apply -f`` does."""
    return expand_lists(read_documents(path))


def read_text(path: str | Path) -> str:
    """The UTF-8 text of one file (``-`` is standard input); ``DocumentReadError`` if unreadable.

    At most :data:`MAX_FILE_BYTES` are read: ``igw validate /dev/zero`` (or a runaway file the gateway
    hot-reloads) read until the process ran out of memory and ended in a ``MemoryError`` traceback."""
    too_large = DocumentReadError(f"{path}: larger than {MAX_FILE_BYTES // 2**20} MiB; not read further")
    try:
        data: bytes | str
        if str(path) == "-":
            # Bytes, as from a file: under the C/POSIX locale the text layer of standard input turns
            # bytes that are not UTF-8 into surrogates, and the YAML parser ended `igw validate -` in
            # a UnicodeEncodeError traceback. A text stream put in its place (a test) is read as text.
            stdin = getattr(sys.stdin, "buffer", None)
            data = sys.stdin.read(MAX_FILE_BYTES + 1) if stdin is None else stdin.read(MAX_FILE_BYTES + 1)
        else:
            with Path(path).open("rb") as file:
                data = file.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise too_large
        return data if isinstance(data, str) else data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DocumentReadError(f"{path}: cannot read file: {exc}") from exc


def iter_contents(documents: list[SourceDocument]) -> Iterator[Any]:
    for document in documents:
        yield document.content
