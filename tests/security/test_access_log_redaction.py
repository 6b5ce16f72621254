"""The access log's lines built on the log writer's thread and redacted at the source: a line written
without the writer's scan is exactly what redacting it writes, and a credential in any text field
of the record is masked as before."""

from __future__ import annotations

import dataclasses
import io
import logging
import random
import re
from collections.abc import Iterator

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import igw.gateway.access_log as access_log_module
from igw.gateway.access_log import AccessRecord, access_log
from igw.gateway.log_buffer import BatchedLineHandler, line_sink
from igw.gateway.redaction import RedactingFormatter, redact_line
from igw.redaction import _TRIGGERS, MASK, redact
from tests.compiled.tree import declared_types, skip_compiled
from tests.log_capture import written_line

SECRET = "sk-live-abcdefgh12345678"
CREDENTIALS = [
    f"Authorization: Bearer {SECRET}",
    f"x-api-key={SECRET}",
    f"rediss://user:{SECRET}@cache.example:6379",
    f"Basic {SECRET}",
]


_DECLARED = declared_types(AccessRecord)  # as written: the compiled build erases field.type
TEXT_FIELDS = [
    f.name
    for f in dataclasses.fields(AccessRecord)
    if "str" in _DECLARED[f.name] and f.name not in ("request_id", "method", "path", "scores")
]
"""Every optional text field of the record (the three always set are handled below)."""


@pytest.fixture
def served_access_logger() -> Iterator[tuple[logging.Logger, io.StringIO, BatchedLineHandler]]:
    """``igw.access`` set up as ``igw serve`` sets it up (its handler alone: the set-up is made again
    by :func:`_written` after pytest's capture handlers were added), put back as it was afterwards."""
    saved = (access_log.handlers[:], access_log.filters[:], access_log.propagate, access_log.level)
    stream = io.StringIO()
    handler = BatchedLineHandler(stream, interval_s=3600.0)
    handler.setFormatter(RedactingFormatter("%(message)s"))
    try:
        yield access_log, stream, handler
    finally:
        handler.close()
        access_log.handlers[:], access_log.filters[:], access_log.propagate, level = saved
        access_log.setLevel(level)


def _serve_setup(handler: BatchedLineHandler) -> None:
    access_log.handlers[:] = [handler]
    access_log.filters[:] = []
    access_log.propagate = False
    access_log.setLevel(logging.INFO)
    assert line_sink(access_log) is handler


def _record(**fields: object) -> AccessRecord:
    record = AccessRecord(request_id="0123456789abcdef" * 2, method="POST", path="/v1/completions")
    record.status = 200
    for name, value in fields.items():
        setattr(record, name, value)
    return record


def _written(handler: BatchedLineHandler, stream: io.StringIO, record: AccessRecord) -> str:
    _serve_setup(handler)
    return written_line(handler, stream, record.emit)


def test_the_record_is_queued_and_its_line_built_by_the_writer(
    served_access_logger: tuple[logging.Logger, io.StringIO, BatchedLineHandler],
) -> None:
    _, stream, handler = served_access_logger
    record = _record(model="m", scores={"10.0.0.1:8000": {"queue": 0.123456789}})
    _serve_setup(handler)
    record.emit()
    assert list(handler._queue) == [record]  # nothing built on the request's path
    handler.flush()
    written = orjson.loads(stream.getvalue())
    assert written["scores"] == {"10.0.0.1:8000": {"queue": 0.1235}}
    assert written["model"] == "m"


@pytest.mark.parametrize("field", TEXT_FIELDS)
@pytest.mark.parametrize("credential", CREDENTIALS)
def test_a_credential_in_any_text_field_is_masked(
    served_access_logger: tuple[logging.Logger, io.StringIO, BatchedLineHandler], field: str, credential: str
) -> None:
    _, stream, handler = served_access_logger
    record = _record(**{field: credential})
    assert not record.redaction_free()
    line = _written(handler, stream, record)
    assert SECRET not in line
    assert MASK in line


@pytest.mark.parametrize("where", ["endpoint key", "scorer name", "request id", "method", "path"])
def test_a_credential_in_the_scores_or_the_always_set_fields_is_masked(
    served_access_logger: tuple[logging.Logger, io.StringIO, BatchedLineHandler], where: str
) -> None:
    _, stream, handler = served_access_logger
    credential = f"authorization:{SECRET}"  # also a valid client request id (no whitespace)
    record = _record(scores={"10.0.0.1:8000": {"queue": 1.0}})
    if where == "endpoint key":
        record.scores = {credential: {"queue": 1.0}}
    elif where == "scorer name":
        record.scores = {"10.0.0.1:8000": {credential: 1.0}}
    elif where == "request id":
        record.request_id = credential
    else:
        setattr(record, where, credential)
    assert not record.redaction_free()
    line = _written(handler, stream, record)
    assert SECRET not in line


def test_a_client_request_id_in_hex_holding_a_private_key_is_masked(
    served_access_logger: tuple[logging.Logger, io.StringIO, BatchedLineHandler],
) -> None:
    """A hex request id was written without a scan (a fresh one spells no trigger); a client's
    ``X-Request-Id`` of up to 128 hex digits can be an Ed25519 key's DER (96 digits), which redaction
    masks since session s46, so a line written unscanned would differ from its redaction."""
    from cryptography.hazmat.primitives import serialization as s
    from cryptography.hazmat.primitives.asymmetric import ed25519

    der = ed25519.Ed25519PrivateKey.generate().private_bytes(
        s.Encoding.DER, s.PrivateFormat.PKCS8, s.NoEncryption()
    )
    _, stream, handler = served_access_logger
    record = _record(request_id=der.hex())
    assert not record.redaction_free()
    line = _written(handler, stream, record)
    assert der.hex()[40:] not in line
    assert orjson.loads(line)["request_id"] == MASK
    assert _record().redaction_free()  # a fresh id (32 digits) still needs no scan


def test_no_trigger_can_be_spelt_in_hexadecimal_digits() -> None:
    """Why a fresh request id needs no scan: every trigger has a letter outside a-f."""
    for trigger in _TRIGGERS:
        assert set(trigger) - set("0123456789abcdef"), trigger


_PIECES = [
    "bearer",
    "Basic",
    "basic",
    "eyJ",
    "authorization",
    "cookie",
    "api-key",
    "x-auth-token",
    "://",
    "@",
    "redis",
    '"',
    "'",
    ":",
    "=",
    " ",
    "\t",
    "\n",
    "\x08",
    "\x01",
    "\\",
    "asic",
    "earer",
    "abcdefgh1234",
    "model",
    "10.0.0.1:8000",
    "é",
    ".",
]


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(_PIECES) for _ in range(rng.randrange(0, 4)))


def test_a_line_written_unscanned_is_what_redaction_writes_for_random_records(
    served_access_logger: tuple[logging.Logger, io.StringIO, BatchedLineHandler],
) -> None:
    """Strings built from redaction's triggers, separators, quotes and control characters (``\\x08``
    is written ``\\b`` in JSON, which can spell ``basic`` out of ``\\x08asic``): whatever the record,
    the written line is :func:`redact_line` of its JSON (``redact`` of it where that masks nothing
    or the line's strings each), it is JSON with the record's keys, and a record judged clean has a
    line redaction leaves unchanged."""
    _, stream, handler = served_access_logger
    rng = random.Random(9)
    clean = 0
    for _ in range(3000):
        record = _record()
        for name in TEXT_FIELDS:
            if rng.random() < 0.3:
                setattr(record, name, _text(rng))
        if rng.random() < 0.3:
            record.request_id = _text(rng)
        if rng.random() < 0.5:
            record.scores = {_text(rng): {_text(rng): rng.random(), "total": 1.0}}
        line = orjson.dumps(record.line_fields()).decode()
        if record.redaction_free():
            clean += 1
            assert redact(line) == line
        written = _written(handler, stream, record)
        assert written == redact_line(line)
        assert list(orjson.loads(written)) == list(record.line_fields())
    assert clean > 100  # the property was exercised on both sides


@skip_compiled(
    "igw.gateway.access_log",
    "_CLEAN and the Final CLEAN_CACHE_SIZE are replaced by monkeypatch; compiled code keeps its own "
    "references to both, bound at build time",
)
def test_the_clean_strings_remembered_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(access_log_module, "_CLEAN", {None})
    monkeypatch.setattr(access_log_module, "CLEAN_CACHE_SIZE", 50)
    for i in range(500):
        assert _record(model=f"model-{i}").redaction_free()
    assert len(access_log_module._CLEAN) <= 50
    assert None in access_log_module._CLEAN


def test_a_string_is_judged_in_its_json_form(
    served_access_logger: tuple[logging.Logger, io.StringIO, BatchedLineHandler],
) -> None:
    """``\\x08asic`` holds no trigger, but JSON writes it ``\\basic``, which the line's redaction
    reads as ``basic``: the string is not clean, and the line is redacted as before."""
    _, stream, handler = served_access_logger
    record = _record(model=f"\x08asic {SECRET}")
    assert not record.redaction_free()
    line = _written(handler, stream, record)
    assert line == redact(orjson.dumps(record.line_fields()).decode())
    assert SECRET not in line


@pytest.mark.parametrize(
    "text",
    [
        'Credentials(access_key="AKIAIOSFODNN7EXAMPLE", secret_key="hunter2xyz")',
        "Config(password='hunter2xyz')",
        "db app:hunter2xyz@tcp(db:3306)/orders",
        '{"password": ["hunter2xyz',
        "Config(token=('hunter2xyz",
        '{"password": [["hunter2xyz"]]}',
        "{'token': {'a': {'b': 'hunter2xyz'}}}",
        'password = "hunter2xyz"',
        "token = 'hunter2xyz'",
    ],
)
def test_reprs_dsns_and_cut_containers_are_masked_in_the_written_line(
    served_access_logger: tuple[logging.Logger, io.StringIO, BatchedLineHandler], text: str
) -> None:
    """The access log judges a string in its JSON form, where a repr's double quotes are escaped
    (``password=\\"...\\"``): the keyword-argument, DSN and cut-container rules hold there too, and the
    string is not taken for clean."""
    _, stream, handler = served_access_logger
    record = _record(model=text)
    assert not record.redaction_free()
    line = _written(handler, stream, record)
    assert "hunter2xyz" not in line, line
    assert MASK in line


def test_a_keyword_argument_keeps_its_separator_in_the_written_line(
    served_access_logger: tuple[logging.Logger, io.StringIO, BatchedLineHandler],
) -> None:
    _, stream, handler = served_access_logger
    record = _record(model="Config(password=None, token='hunter2xyz', user='ops')")
    line = _written(handler, stream, record)
    assert orjson.loads(line)["model"] == f"Config(password={MASK}, token='{MASK}', user='ops')"


@pytest.mark.parametrize(
    "after", [b"", b"'"]
)  # the repr in single quotes, or in double ones (escaped in JSON)
def test_a_key_s_bytes_repr_in_a_text_field_is_masked_in_the_written_line(
    served_access_logger: tuple[logging.Logger, io.StringIO, BatchedLineHandler], after: bytes
) -> None:
    """The line's JSON doubles the repr's backslashes (``b'0.\\\\x02\\\\x01...'``): the key's DER went
    through whole, and the string was not even taken for one to scan."""
    from cryptography.hazmat.primitives import serialization as s
    from cryptography.hazmat.primitives.asymmetric import ed25519

    der = ed25519.Ed25519PrivateKey.generate().private_bytes(
        s.Encoding.DER, s.PrivateFormat.PKCS8, s.NoEncryption()
    )
    _, stream, handler = served_access_logger
    record = _record(error=f"bad key {der + after!r} refused")
    assert not record.redaction_free()
    line = _written(handler, stream, record)
    q = repr(der + after)[1]
    assert orjson.loads(line)["error"] == f"bad key b{q}{MASK}{q} refused"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ('{"password": [1234, "x"]}', f'{{"password": ["{MASK}", "{MASK}"]}}'),
        ("Config(password=[1234, 5678])", f"Config(password=['{MASK}', '{MASK}'])"),
        ('password: "hunter2xyz"', f'password: "{MASK}"'),
        ("client_secret: 'hunter2xyz'", f"client_secret: '{MASK}'"),
        (
            "send: b'GET / HTTP/1.1\\r\\nCookie: sid=hunter2xyz\\r\\nHost: h\\r\\n'",
            f"send: b'GET / HTTP/1.1\\r\\nCookie: {MASK}\\r\\nHost: h\\r\\n'",
        ),
        ('{"Cookie": "sid=hunter2xyz"}', f'{{"Cookie": "{MASK}"}}'),
        ("[('set-cookie', 'sid=hunter2xyz; Path=/')]", f"[('set-cookie', '{MASK}')]"),
        ("https://app.example/cb#hunter2xyzSECRETTOKEN123456", f"https://app.example/cb#{MASK}"),
    ],
)
def test_round_10_secrets_are_masked_in_the_written_line(
    served_access_logger: tuple[logging.Logger, io.StringIO, BatchedLineHandler], text: str, shown: str
) -> None:
    """Round 10 through the real writer, where the string is judged and redacted in its JSON form
    (its double quotes and backslashes escaped): a number in a secret field's array, a quoted value
    after ``name:``, a cookie after an escaped line break, in escaped JSON or in a header tuple, a
    token as a URL's fragment. Each went through; the line stays JSON, ``request_id`` and ``status``
    visible."""
    _, stream, handler = served_access_logger
    record = _record(error=text)
    assert not record.redaction_free()
    written = orjson.loads(_written(handler, stream, record))
    assert written["error"] == shown
    assert written["request_id"] == "0123456789abcdef" * 2
    assert written["status"] == 200
    assert _record(error='token: expired, max_tokens: "16"').redaction_free()


_PEM_LINE = 64
_DER = bytes.fromhex("302e020100300506032b657004220420") + bytes(range(101, 133))
"""An Ed25519 private key's PKCS#8 DER (its 32-byte seed made up): the bytes-repr shape's key."""


def _shapes(secret: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Secret shapes holding ``secret`` (letters and digits), whole and cut before their end (a cut
    one only ends a text), each with the piece of it that must not be written."""
    body = (secret * (2 * _PEM_LINE // len(secret) + 2))[: 2 * _PEM_LINE]
    pem_lines = "\n".join([body[:_PEM_LINE], body[_PEM_LINE:]])
    jwt = f"eyJhbGciOiJIUzI1NiJ9.eyJ{secret}.{secret[::-1]}"
    der = repr(_DER)
    whole = [
        (f"password={secret}", secret),
        (f'{{"password": "{secret}"}}', secret),
        (f'{{\\"client_secret\\": \\"{secret}\\"}}', secret),
        (f"Config(token='{secret}')", secret),
        (f"Authorization: Bearer {secret}", secret),
        (f"Cookie: sid={secret}", secret),
        (jwt, secret),
        (f"-----BEGIN PRIVATE KEY-----\n{pem_lines}\n-----END PRIVATE KEY-----\n", body[:_PEM_LINE]),
        (f"bad key {der} refused", der[-40:]),
        (f"rediss://user:{secret}@cache.example:6379", secret),
        (f"postgres://:{secret}@[::1]:5432/db", secret),
        (f"redis%3A%2F%2Fu%3A{secret}%40cache.example%3A6379", secret),
        (f"redis%253A%252F%252Fu%253A{secret}%2540cache.example", secret),
        (f"://u:{secret}@cache.example:6379", secret),
        (f"Bearer {secret}", secret),
        (f"Basic {secret}", secret),
    ]
    cut = [
        (f'{{"password": "{secret}', secret),
        (f'{{\\"client_secret\\": \\"{secret}', secret),
        (f"Config(token='{secret}", secret),
        (f'Config(api_key="{secret}', secret),
        (f'{{"refresh_token": ["{secret}', secret),
        (f"{{'password': '{secret}", secret),
        (f"('set-cookie', 'sid={secret}", secret),
        (jwt[: jwt.rindex(".")], secret),
        (f"-----BEGIN PRIVATE KEY-----\n{pem_lines[:-5]}", body[:_PEM_LINE]),
        (f"bad key {der[:-10]}", der[-60:-10]),
    ]
    return whole, cut


_SECRET = st.text(alphabet="ABCDEFGHJKLMNPQRSTUVWXYZabcdefghjkmnpqrstuvwxyz23456789", min_size=6, max_size=10)
_GLUED_PREFIXES = st.sampled_from(
    ["", "upstream said ", "error: ", "_", "x", "1", "é", "url=", "(", "\\n", "a.b+"]
)
"""Text before a shape, glued to it too: the user-info went through after an underscore, digit
or letter glued to the scheme (``_rediss://user:<password>@host``) until session s48 (round 15), a
credential header's value after one glued to its name (``xCookie: sid=<secret>``) until round 16,
when these prefixes were drawn for every shape, not for URLs only. A ``Bearer``/``Basic`` scheme word
(``xBearer <token>``), a URL encoded twice and one cut before its ``://`` went through until round 17.
A URL after another one with only a backslash between (``redis://u:<a>@h\\_redis://u:<b>@h``) was taken
for the first one's path, its user-info shown, until round 15 too."""
_GLUED_BEFORE_A_HEADER = st.sampled_from(["", "upstream said ", "error: ", "_", "1", "é", "(", "\\n", "a.b+"])
"""The glued prefixes without an ASCII letter: after one a header's name is part of another word
(``forwardAuthorization: true``, ``preauthorization: pending``), which round 16 masked at first."""
_HEADER_SHAPE = re.compile(
    r"(?i)(?:proxy-)?authorization|set-cookie|cookie|x-api-key|api-key|apikey|x-auth-token|x-amz"
)
_SEPARATORS = st.sampled_from([" ", "; ", "\n", " | ", ": ", '" ', "' ", "\\", "\t"])


@st.composite
def _planted_text(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A text of 1-3 secret shapes (the last one possibly cut) between separators, and the pieces
    planted in it."""
    pieces, planted = [], []
    count = draw(st.integers(1, 3))
    for index in range(count):
        whole, cut = _shapes("Zq7" + draw(_SECRET) + "x9")
        text, piece = draw(st.sampled_from(whole + cut if index == count - 1 else whole))
        glue = _GLUED_BEFORE_A_HEADER if _HEADER_SHAPE.match(text) else _GLUED_PREFIXES
        pieces.append(draw(glue) + text)
        planted.append(piece)
        if index < count - 1:
            pieces.append(draw(_SEPARATORS))
    return "".join(pieces), planted


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    texts=st.dictionaries(st.sampled_from(TEXT_FIELDS), _planted_text(), min_size=1, max_size=4),
    scored=st.booleans(),
    keys=st.lists(_planted_text(), max_size=4),
)
def test_every_written_line_stays_json_without_the_planted_secrets(
    served_access_logger: tuple[logging.Logger, io.StringIO, BatchedLineHandler],
    texts: dict[str, tuple[str, list[str]]],
    scored: bool,
    keys: list[tuple[str, list[str]]],
) -> None:
    """Text fields holding secrets, some cut before their closing quote or end (an error text quoted
    short): the written line parses as JSON with the record's keys, and no planted secret is in it.
    A rule masking "to the end of the line" took the line's own closing ``"}`` (and the fields after
    the secret) until session s47, which broke every log shipper's JSON parser on such a line.

    The scores' keys (endpoint keys, scorer names) holding secrets too: every key is kept, however
    many redact alike (two were one key, the first one's scores lost, until session s48)."""
    _, stream, handler = served_access_logger
    record = _record(**{"tenant": "team-a", **{field: text for field, (text, _) in texts.items()}})
    if scored:
        record.scores = {"10.0.0.1:8000": {"queue": 0.5, "total": 1.0}}
    if keys:
        scores = {text: {"queue": 0.5, text: 1.0, "total": 1.0} for text, _ in keys}
        record.scores = {**(record.scores or {}), **scores}
    line = _written(handler, stream, record)
    written = orjson.loads(line)
    assert list(written) == list(record.line_fields())
    if record.scores:
        assert len(written["scores"]) == len(record.scores), line
        for endpoint, shown in zip(record.scores, written["scores"].values(), strict=True):
            assert len(shown) == len(record.scores[endpoint]), line
    for _, planted in [*texts.values(), *keys]:
        for piece in planted:
            assert piece not in line, (piece, line)
    assert written["request_id"] == record.request_id
    assert written["status"] == 200


@pytest.mark.parametrize(
    "text",
    [
        'upstream said {"password": "hunter2xyz',
        "upstream said {'password': 'hunter2xyz",
        'body {"password": ["hunter2xyz',
        "Config(password='hunter2xyz",
        'Config(password="hunter2xyz',
        'Config(password=\\"hunter2xyz',
        '{\\"password\\": \\"hunter2xyz',
        "send: ('cookie', 'sid=hunter2xyz",
    ],
)
def test_a_value_cut_before_its_closing_quote_keeps_the_line_json(
    served_access_logger: tuple[logging.Logger, io.StringIO, BatchedLineHandler], text: str
) -> None:
    """Each rule that masks a cut value "to the end of the line" took the JSON line's own closing
    ``"`` and the fields after the secret with it until session s47: the line was no JSON (a log
    shipper's parser drops it). Masked within the field's string, the line stays JSON, every field
    kept."""
    _, stream, handler = served_access_logger
    for field in ("error", "reason"):
        record = _record(**{field: text, "tenant": "team-a", "model": "m"})
        line = _written(handler, stream, record)
        assert "hunter2xyz" not in line, line
        written = orjson.loads(line)
        assert list(written) == list(record.line_fields())
        assert written[field].endswith(MASK)
        assert (written["tenant"], written["model"], written["status"]) == ("team-a", "m", 200)


def test_a_json_log_line_through_the_formatter_stays_json() -> None:
    """Any JSON line on a message-only redacting handler (the EMF documents share the access log's
    stdout) is redacted string by string; a line that is not JSON is redacted as a text."""
    formatter = RedactingFormatter("%(message)s")
    line = orjson.dumps(
        {"error": 'said {"password": "hunter2xyz', "n": [1, "Bearer abcdefgh12345678"]}
    ).decode()
    record = logging.LogRecord("igw.emf", logging.INFO, __file__, 1, line, None, None)
    written = orjson.loads(formatter.format(record))
    assert written == {"error": f'said {{"password": "{MASK}', "n": [1, f"Bearer {MASK}"]}
    assert formatter.format_line('{"a": "b" password: "hunter2xyz') == f'{{"a": "b" password: "{MASK}'
    assert formatter.format_line('{"model": "m"}') == '{"model": "m"}'


@pytest.mark.parametrize(
    ("scores", "shown"),
    [
        (
            {"Bearer abcdefgh12345678": {"q": 1.0}, "Bearer zyxwvuts87654321": {"q": 2.0}},
            {f"Bearer {MASK}": {"q": 1.0}, f"Bearer {MASK} (2)": {"q": 2.0}},
        ),
        (
            {f"Bearer {MASK}": {"q": 1.0}, "Bearer abcdefgh12345678": {"q": 2.0}},
            {f"Bearer {MASK}": {"q": 1.0}, f"Bearer {MASK} (2)": {"q": 2.0}},
        ),
        (
            {"10.0.0.1:8000": {"Bearer abcdefgh12345678": 1.0, "Bearer zyxwvuts87654321": 2.0}},
            {"10.0.0.1:8000": {f"Bearer {MASK}": 1.0, f"Bearer {MASK} (2)": 2.0}},
        ),
    ],
)
def test_keys_that_redact_alike_are_all_kept(
    served_access_logger: tuple[logging.Logger, io.StringIO, BatchedLineHandler],
    scores: dict[str, dict[str, float]],
    shown: dict[str, dict[str, float]],
) -> None:
    """Two keys masked to the same text were one key: the first one's value was lost. A key redaction
    leaves as it is keeps its text; a masked one already taken gets a number."""
    _, stream, handler = served_access_logger
    written = orjson.loads(_written(handler, stream, _record(scores=scores)))
    assert written["scores"] == shown


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        ('{"password": "hunter2xyz", "n": 1}', {"password": MASK, "n": 1}),
        (
            '{"client_secret": ["hunter2xyz", 12, null], "e": "Bearer abcdefgh12345678"}',
            {"client_secret": [MASK, MASK, None], "e": f"Bearer {MASK}"},
        ),
        ('{"Cookie": "sid=hunter2xyz", "ok": true}', {"Cookie": MASK, "ok": True}),
        (
            '{"credentials": {"username": "ops", "password": "hunter2xyz"}}',
            {"credentials": {"username": "ops", "password": MASK}},
        ),
        ('{"token": {"a": {"b": "hunter2xyz"}}}', {"token": {"a": {"b": MASK}}}),
        ('{"max_tokens": 16, "token_type": "Bearer"}', None),
    ],
)
def test_a_json_line_s_secret_named_field_is_masked_string_by_string_too(
    line: str, shown: dict[str, object] | None
) -> None:
    """The per-string path redacted each string alone, and a value lost its key: ``{"password":
    "hunter2xyz"}``, masked by the whole line's redaction, was written with the password."""
    written = orjson.loads(redact_line(line))
    assert written == (orjson.loads(line) if shown is None else shown)
    assert "hunter2xyz" not in redact_line(line)


@pytest.mark.parametrize(
    ("text", "shown"),
    [("password: hunter2xyz", f"password: {MASK}"), ("token = hunter2xyz", f"token = {MASK}")],
)
def test_a_configuration_line_in_a_text_field_is_masked_in_the_written_line(
    served_access_logger: tuple[logging.Logger, io.StringIO, BatchedLineHandler], text: str, shown: str
) -> None:
    _, stream, handler = served_access_logger
    record = _record(error=text)
    assert not record.redaction_free()
    assert orjson.loads(_written(handler, stream, record))["error"] == shown
    assert _record(error="token: expired").redaction_free()  # prose the rule keeps: judged clean
