"""Keep credentials out of every log line.

:class:`RedactingFormatter` applies :func:`igw.redaction.redact` to whole formatted records - message,
arguments and any traceback - so no log path (ours, aiohttp's, a library's exception text) can print
a secret. The request path additionally never puts header values into messages; this is the safety
net.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

import orjson

from igw.redaction import _CREDENTIALS_NAME, MASK, redact

LOG_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""The line every long-running igw command logs: time, level, logger, message."""


def worker_log_format(index: int) -> str:
    """:data:`LOG_FORMAT` for worker ``index`` of an ``igw serve --workers N`` group: the logger's name
    followed by ``[worker N]``. The workers share the container's stderr, and before session s40 their
    lines were alike - a reload rejected by one worker, a JWKS fetch that failed in one, a channel that
    broke could not be told from the others'."""
    return f"%(asctime)s %(levelname)s %(name)s [worker {index}]: %(message)s"


class RedactingFormatter(logging.Formatter):
    """A :class:`logging.Formatter` whose output has passed through :func:`redact`."""

    def __init__(
        self,
        fmt: str | None = None,
        datefmt: str | None = None,
        style: Literal["%", "{", "$"] = "%",
        validate: bool = True,
        *,
        defaults: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(fmt, datefmt, style, validate, defaults=defaults)
        self.message_only = self._fmt == self._style.default_format
        """Whether the format is the message alone (``%(message)s`` or its ``{``/``$`` form): then a
        record without arguments or exception formats to ``redact(message)``, so a plain line can be
        formatted without building its :class:`logging.LogRecord` (:meth:`format_line`). Fixed at
        construction (a formatter's format does not change); an attribute, as the access log asks it
        per request and a property is an interpreted call from the compiled log buffer."""

    def format_line(self, line: str) -> str:
        """What :meth:`format` makes of an INFO record whose message is ``line`` (no arguments, no
        exception), for a :attr:`message_only` format."""
        return redact_line(line)

    def format(self, record: logging.LogRecord) -> str:
        formatted = super().format(record)
        if self.message_only:
            return redact_line(formatted)
        head = self.formatMessage(record)
        start = _message_start(head, record.message, formatted)
        redacted = (
            redact(formatted) if start is None else redact(formatted[:start]) + redact(formatted[start:])
        )
        if redacted == formatted or start is None or not record.message.startswith(("{", "[")):
            return redacted
        return _prefixed_json(formatted[:start], record.message, formatted) or redacted


def _message_start(head: str, message: str, formatted: str) -> int | None:
    """Where the message starts in a formatted record whose format ends in it (:data:`LOG_FORMAT`'s
    time, level and logger, then the message), or ``None`` where the format puts something after it.

    The prefix and the message (with any traceback after it) are redacted apart, as the message-only
    formatter redacts the message: a rule that reads a line's start (a configuration line
    ``client_secret: <value>``, pydantic's location line) sees the message's. Until session s50
    (round 22) the prefixed line was redacted whole, and ``logger.error("client_secret: %s", secret)``
    was written unmasked by ``igw serve``, ``igw operator`` and ``igw global serve``, masked by the
    access log's formatter."""
    if not (formatted.startswith(head) and head.endswith(message)):
        return None
    return len(head) - len(message)


def redact_line(line: str) -> str:
    """:func:`redact` of a log line, which stays JSON when it was JSON: the access log's and the EMF
    documents' lines (``igw serve``'s stdout), which log shippers parse (CloudWatch Logs Insights,
    Fluent Bit's JSON parser).

    Redaction reads a line as text, and some rules mask to the end of the line (a secret-named field
    or keyword argument, a container, a bytes repr whose value was cut before its closing quote: an
    error text ``{"password": "hunter2`` quoted short). In a JSON line that end is the line's own
    ``"}``, which went with the secret until session s47: the line was no JSON, the fields after it
    were lost, and a shipper's parser dropped or mangled it. So where redaction changes a line that
    starts with ``{`` or ``[``, that line is parsed and each of its strings (an object's keys too) is
    redacted on its own, as its JSON form (:func:`_redacted_string`): every rule ends at the string's
    end, and the line is written again as JSON, its keys, numbers and literals as they were. A line
    redaction leaves as it is costs what it did (one :func:`redact`); so does any line that is not
    JSON."""
    redacted = redact(line)
    if redacted == line or not line.startswith(("{", "[")):
        return redacted
    return _json_redacted(line) or redacted


def _prefixed_json(prefix: str, message: str, formatted: str) -> str | None:
    """A formatted record whose message is JSON after the format's prefix (:data:`LOG_FORMAT`'s time,
    level and logger: ``2026-12-07 ... INFO igw.x: {"error": ...}``), its prefix and what follows the
    message (a traceback) redacted as text, its message as :func:`redact_line` redacts a JSON line;
    ``None`` where the message is no JSON. ``formatted`` is ``prefix``, the message, then anything
    after it. The message's redaction as text is kept where it leaves it JSON (its spacing as logged).
    Until session s48 (round 12) such a line was redacted as text only, and a rule masking a cut value
    to the end of the line took the message's closing ``"}``."""
    head = len(prefix) + len(message)
    if len(formatted) == head:  # no traceback: the message's redaction as text, if it left JSON
        redacted = redact(message)
        if _is_json(redacted):
            return redact(prefix) + redacted
    json_redacted = _json_redacted(message)
    if json_redacted is None:
        return None
    return redact(prefix) + json_redacted + redact(formatted[head:])


def _is_json(text: str) -> bool:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


def _json_redacted(line: str) -> str | None:
    """``line`` parsed as JSON, redacted string by string and written again, or ``None`` if no JSON."""
    try:
        parsed = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return orjson.dumps(_redacted_value(parsed)).decode()


def _redacted_value(value: object) -> object:
    """A parsed JSON value with every string in it, keys included, redacted (:func:`_redacted_string`)."""
    if isinstance(value, str):
        return _redacted_string(value)
    if isinstance(value, dict):
        return _redacted_object(value, masked=False)
    if isinstance(value, list):
        return [_redacted_value(item) for item in value]
    return value


def _redacted_object(value: dict[str, object], *, masked: bool) -> dict[str, object]:
    """A parsed JSON object with its keys redacted and every key kept, its values redacted
    (:func:`_redacted_value`) or, under a secret's name (:func:`_secret_name`) or when ``masked``,
    masked (:func:`_masked_value`).

    Two keys that redact alike (``Bearer <token a>`` and ``Bearer <token b>``, both ``Bearer
    [REDACTED]``) were one key until session s48 (round 12), and the first one's value was lost: a
    redacted key already taken gets `` (2)``, `` (3)``... after it; a key redaction leaves as it is keeps
    its text. Nor, until then, did a value know its key: ``{"password": "hunter2"}``, whose whole-line
    redaction masks the value, was written with it, each string redacted alone."""
    names = {key: _redacted_string(key) for key in value}
    taken = {key for key, name in names.items() if name == key}
    shown: dict[str, object] = {}
    for key, item in value.items():
        name = base = names[key]
        count = 1
        while name != key and (name in taken or name in shown):
            count += 1
            name = f"{base} ({count})"
        own_names = isinstance(item, dict) and _CREDENTIALS_NAME.fullmatch(key) is not None
        if masked or (_secret_name(key) and not own_names):
            shown[name] = _masked_value(item)
        else:
            shown[name] = _redacted_value(item)
    return shown


def _masked_value(value: object) -> object:
    """A secret field's value as the whole-line rules mask it: every string and number :data:`MASK`
    (a string, so the JSON stays JSON), an object's keys, ``null`` and the booleans kept."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (str, int, float)):
        return MASK
    if isinstance(value, dict):
        return _redacted_object(value, masked=True)
    if isinstance(value, list):
        return [_masked_value(item) for item in value]
    return value


@functools.lru_cache(maxsize=1024)
def _secret_name(key: str) -> bool:
    """Whether redaction masks a value under ``key`` in a JSON object (``password``, ``client_secret``,
    ``Cookie``, ``Authorization``...): the rules themselves asked, with a one-field object, so the
    per-string path masks what the whole line's redaction did."""
    return redact("{" + orjson.dumps(key).decode() + ':"probe"}').endswith(f':"{MASK}"}}')


def _redacted_string(text: str) -> str:
    """``text`` redacted as it is written in a JSON line (its quotes and escapes, as the line's
    redaction read it) when that leaves a JSON string; else (a rule took the closing quote or cut an
    escape) redacted as the text itself, whose masks then cannot reach past its end."""
    encoded = orjson.dumps(text).decode()
    redacted = redact(encoded)
    if redacted == encoded:
        return text
    try:
        decoded = orjson.loads(redacted)
    except orjson.JSONDecodeError:
        decoded = None
    return decoded if isinstance(decoded, str) else redact(text)


THIRD_PARTY_LOGGERS: Final = (
    "botocore",
    "boto3",
    "s3transfer",
    "urllib3",
    "kubernetes",
    "aiohttp",
    "redis",
    "httpx",
    "httpcore",
    "hpack",
    "h2",
    "kopf",
    "celpy",
    "opentelemetry",
    "oauthlib",
    "requests_oauthlib",
    "websocket",
)
"""Libraries whose DEBUG lines quote what they send or receive: botocore logs every request's
parameters and body (ACM's ``ImportCertificate`` carries the private key), urllib3 and aiohttp URLs and
headers, the kubernetes client and redis their requests and commands (``AUTH``), hpack decoded
headers, kopf every watched object's whole body, its diff and each patch (``Creation is in progress:
{...}``: an InferenceGatewayConfig's ``podDefaults.env`` values with it), celpy the operands of every
CEL function and operator it evaluates (``function_size(StringType('<the value>'))``, every variable's
value in its activation; igw parses the CRD's rules with it, :mod:`igw.config.cel_cost`),
OpenTelemetry's SDK and OTLP exporter (``opentelemetry.*``: the failure text of a resource detector's
command or file, and whatever a later exporter release adds), and the OAuth libraries the kubernetes
client loads for a kubeconfig's OIDC refresh (``requests_oauthlib`` logs the refresh request's
headers and body, ``refresh_token`` and ``client_secret`` in it; ``oauthlib`` the prepared body)
and its websocket client (``kubectl exec``-style streams, frames when traced): none of the four
capped before session s45.
:func:`configure_logging` keeps them at INFO under ``--log-level debug``."""

OTEL_HEADER_LOGGER: Final = "opentelemetry.util.re"
"""The logger of the OpenTelemetry SDK's parser of ``OTEL_EXPORTER_OTLP_HEADERS``, which warns about a
header it cannot parse by quoting it whole: :class:`HeaderValueFilter` goes on it."""


class HeaderValueFilter(logging.Filter):
    """Masks the value of every header a record of :data:`OTEL_HEADER_LOGGER` quotes, its name kept.

    ``OTEL_EXPORTER_OTLP_HEADERS='x-honeycomb-team: <key>'`` (a colon where the format wants ``=``)
    or a value with a ``;`` made the exporter log ``Header format invalid! ...: x-honeycomb-team:
    <key>`` at WARNING, at every log level, when ``igw serve --otel-endpoint`` built it; the
    redacting formatter masks only the headers it knows by name (``Authorization``, ``x-api-key``),
    not a vendor's (``x-honeycomb-team``, ``signoz-ingestion-key``, ``dd-api-key``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(_header_name_only(arg) for arg in record.args)
        return True


def _header_name_only(arg: object) -> object:
    """A quoted ``name=value``/``name: value``/``name value`` header with the value masked; other
    arguments as they are."""
    if not isinstance(arg, str):
        return arg
    name = _HEADER_NAME.match(arg)
    return f"{name.group(1)} {MASK}" if name else MASK


_HEADER_NAME: Final = re.compile(r"\s*([^\s:=]+)")
"""A header's name: what comes before its first blank, ``:`` or ``=``."""
_HEADER_FILTER: Final = HeaderValueFilter()
DEBUG_THIRD_PARTY_ENV: Final = "IGW_DEBUG_THIRD_PARTY"
"""Set to ``1`` to let :data:`THIRD_PARTY_LOGGERS` log at DEBUG too, when a library's own requests
must be seen (redaction still applies, but it masks what it recognises, not everything)."""


def install(handlers: list[logging.Handler], fmt: str | None = None) -> None:
    """Give each of ``handlers`` a redacting formatter with format string ``fmt``."""
    for handler in handlers:
        handler.setFormatter(RedactingFormatter(fmt))


def configure_logging(level: str, handler: Callable[[], logging.Handler] | None = None) -> None:
    """The root logger of a long-running command (``igw serve``, ``igw operator``, ``igw global
    serve``) at ``level``, its lines on stderr in :data:`LOG_FORMAT`, every one redacted. One place
    for all three: the operator and the global router used :func:`logging.basicConfig` alone, and
    kopf logged the API server's URL with its user-info (``GET http://admin:<password>@host/api``)
    at every failed request.

    ``handler`` builds the root logger's handler (else :func:`logging.basicConfig`'s
    :class:`logging.StreamHandler` on stderr), called only when the root logger has none yet: the
    servers pass a :class:`~igw.gateway.log_buffer.BatchedLineHandler` on stderr, so a stderr that
    nobody reads cannot block their event loop (a StreamHandler writes on the logging thread: 272
    malformed requests, one warning each, filled a 64 KiB pipe and stopped ``igw global serve``
    answering anything until session s42).

    At ``debug`` the :data:`THIRD_PARTY_LOGGERS` stay at INFO unless :data:`DEBUG_THIRD_PARTY_ENV` is
    ``1``: ``igw operator --log-level debug`` logged botocore's ``ImportCertificate`` request, the
    Secret's private key in it, and redaction is a safety net, not a parser of every library's dump."""
    root = logging.getLogger()
    handlers = [handler()] if handler is not None and not root.handlers else None
    logging.basicConfig(level=level.upper(), handlers=handlers)
    install(root.handlers, LOG_FORMAT)
    header_logger = logging.getLogger(OTEL_HEADER_LOGGER)
    if _HEADER_FILTER not in header_logger.filters:
        header_logger.addFilter(_HEADER_FILTER)
    opted_in = os.environ.get(DEBUG_THIRD_PARTY_ENV, "") == "1"
    for name in THIRD_PARTY_LOGGERS:
        capped = root.getEffectiveLevel() < logging.INFO and not opted_in
        logging.getLogger(name).setLevel(logging.INFO if capped else logging.NOTSET)
