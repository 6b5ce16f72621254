"""Keep credentials out of every text igw writes or shows: logs, error messages, reports.

:func:`redact` masks bearer tokens, JWT-looking strings and the values of credential headers
(``Authorization``, ``Proxy-Authorization``, ``Cookie``, ``Set-Cookie``, API-key headers) and, in
URLs, the user-info and the query and fragment values (:func:`redact_url`: ``rediss://user:password@host``,
``https://idp/jwks?api_key=...``) in a text; :func:`redact_value` also masks values
assigned to a secret's name and token-like runs, for quoting what a user supplied.

At the bottom of the package (the standard library only) so that every layer uses the same rules:
the gateway's log formatter (:mod:`igw.gateway.redaction`), the configuration's problems
(:class:`igw.config.errors.Problem`), the checks' results (:class:`igw.checks.model.Result`), the
add-on's and the operator's messages. Before, the configuration layer (below the gateway) masked URL
user-info only, and ``igw validate`` and ``igw audit`` quoted a token put in a wrong field whole.
"""

from __future__ import annotations

import codecs
import functools
import re
from collections.abc import Callable
from typing import Final

MASK: Final = "[REDACTED]"

_JWT: Final = re.compile(
    r"eyJ[A-Za-z0-9_-]{2,}\.(?:\\n|\r?\n)?[A-Za-z0-9_-]{2,}"
    r"(?:\.(?:\\n|\r?\n)?[A-Za-z0-9_-]*|(?=\\n|\r?\n|\Z|\\*[\"']))"
)
"""Three base64url segments, the first a JSON object (``eyJ`` is ``{"``): a JWS/JWT. A line break (real
or escaped) after a dot is taken in: a token wrapped at its dots went through whole until session s47,
as did one cut after its payload (a log line cut at 4 KiB), whose claims are masked too. Since round 11
also where the cut ends a quoted string (a JSON line's field, a repr: ``"error":"... eyJ...eyJ..."``),
whose closing quote, not the line's end, follows it: the claims went through there."""

_BEARER: Final = re.compile(r"(?i)(?:(?<![a-z])|((?<=[a-z])))(bearer|basic)\s+([^\s,;\"'\\]+)")
"""A scheme word and the value after it; :func:`_mask_bearer` decides whether that value is a token.

Since round 17 (session s49) whatever is glued before the word: until then a word boundary had to
come before it, and ``_Basic <credential>``, ``1Bearer <token>``, ``éBearer <token>`` and ``xBearer
<token>`` went through. After an ASCII letter (group 1, empty, says so) the word may end another word
(``nonBearer tokens``, ``torchbearer``, ``HTTPBasic``), so there the value must look like a token by its
characters too (:data:`_TOKEN_CHARACTERS`). Also since round 17 the value ends at a backslash, which
no bearer token (RFC 6750 ``b64token``) or ``token68`` holds: an escaped line break (``Bearer
<a>\\nBearer <b>``, a JSON string's form of two lines) or one backslash between two values took the
second scheme word in as the first token's end, and its token was shown."""
_TOKEN_CHARACTERS: Final = re.compile(r"[0-9.+/=~]|[a-z][A-Z]")
"""A digit, a JWT's or base64's punctuation, or a capital after a small letter (``dXNlcjpwYXNz``): what a
value after a scheme word glued to an ASCII letter needs to be taken for a token. Words joined by
``-`` or ``_`` (``nonBearer authorization_required``) are prose there, a token after a boundary."""
_AUTH_PARAM: Final = re.compile(r"(?i)(?:realm|scope|error|error_description|error_uri|charset)=(?!=*\Z)")
"""A challenge's ``auth-param`` (RFC 6750 section 3, RFC 7617: ``realm=igw``, ``error=invalid_token``)
after ``Bearer``/``Basic``: a name and ``=`` with more after it, which a bearer token (``b64token``) or
basic credential (``token68``) never is (their ``=`` is trailing padding only). Only these names: an
unknown ``name=value`` after the scheme word may carry a credential in its value and stays masked."""
TOKEN_MIN_CHARS: Final = 8
"""Shorter values after ``bearer``/``basic`` are words of prose (``bearer token refused``), not tokens."""
WORD_MAX_CHARS: Final = 24
"""Letters-only values this long are taken for tokens all the same: no English word is that long."""
_CREDENTIAL_HEADER: Final = re.compile(
    r"(?i)(?:(?<![a-z])|(?<=\\[nrt]))((?:proxy-)?authorization|set-cookie|cookie|x-api-key|api-key|apikey"
    r"|x-auth-token|x-amz-security-token|(?:aws_)?secret_access_key|aws_session_token|aws_security_token)"
    r"((?:\\*[\"'])?\s*[:=]\s*(?:\\*[\"'])?|\\*[\"']\s*,\s*b?\\*[\"'])((?:(?!\\+[rn\"'])[^\r\n\"'])*)"
)
"""A credential header's or AWS credential file's value (``X-Amz-Security-Token: ...``,
``aws_secret_access_key = ...``, ``AWS_SESSION_TOKEN: ...``) to the end of its line or quote: the AWS
names were masked only as ``name=value`` before session s47, not with the blanks or the colon of the
credentials file, ``aws configure list`` and a YAML dump.

Since session s47 (round 10) also: after an escaped line break (``send: b'GET / HTTP/1.1\\r\\nCookie:
...'``, http.client's debug output, where ``\\b`` finds no word start), with escaped quotes (``{\\"Cookie\\":
\\"...\\"}``, a body in the access log's JSON) and as a header tuple (``('set-cookie', '...')``,
``(b'cookie', b'...')``: aiohttp's, httpx's and hpack's raw headers), where the cookie went through whole; the
value ends at an escaped line break or quote, so the headers after it stay readable.

Since round 16 (session s48) a name is also found after a digit, an underscore or a non-ASCII letter
glued to it, and that text is kept (``_Authorization: [REDACTED]``, ``1X-Api-Key: [REDACTED]``): a word
boundary, or an escaped line break, had to come before the name. Not after an ASCII letter: a name
ending in a header's name is a camel-case setting or a word (``forwardAuthorization: true`` in the
audit's advice, ``preauthorization: pending``), which round 16 had masked (the final CI caught it)."""
_AWS_KEY_PAIR: Final = re.compile(
    r"(?<![A-Z0-9])((?:AKIA|ASIA)[A-Z0-9]{16}[\"']?(?:\s*[:,=]\s*|\s+)[\"']?)"
    r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"
)
"""An AWS access key id (``AKIA``/``ASIA`` and 16 capitals or digits) with a 40-character secret
access key right after it (``AKIA...:<secret>``, ``(AKIA..., <secret>)``): the secret is masked, the
key id (an identifier, which CloudTrail shows) kept to say which key."""
_URL: Final = re.compile(
    r"(?<![\w+.-])[\w+.-]*://(?:[\w+.-]++(?!://)|(?:(?!://)[^\s\"'<>\\\w+.-])++|\\++(?![nrt]))*+"
)
"""A URL with a scheme, up to the first blank, quote, angle bracket, escaped line break or tab (``\\n``
in a JSON string or a repr, its backslash doubled too) or the next scheme: what :func:`redact_url`
rewrites.

The scheme is taken with every word character, ``+``, ``.`` and ``-`` glued before it (a run starts
after any other character), so the user-info is masked whatever text is glued to the scheme and that
text is kept with it. Until session s48 (round 15) a word boundary had to come before the scheme's
first letter: ``_rediss://user:<password>@host``, ``1redis://...`` and ``éredis://...`` went through
whole. Starting only where a run starts keeps the scan linear on a long run of letters. Also until
round 15 an escaped line break and a next URL glued on were taken in (``redis://u:<a>@h\\nredis://u:<b>@h``,
the access log's JSON form of a multi-line text; ``redis://u:<a>@h1,redis://u:<b>@h2``, a list), and
the second URL's user-info went through as the first one's path. A URL in another's query value
(``?next=https://...``) is masked as a URL of its own now: its user-info, query values and secret
path segments, not its host and path.

The scheme may be empty since round 17 (session s49): an authority after a bare ``://`` (``://u:p@h``,
a URL whose scheme a cut or a template left out) had its password shown. A bare ``://`` also ends the URL
before it, as a next scheme does (``://u:<a>@h\\://u:<b>@h``)."""
_ENCODED_URL: Final = re.compile(
    r"(?i)(?<![\w+.-])([\w+.-]+%(?:25)*3A%(?:25)*2F%(?:25)*2F)"
    r"((?:(?!%(?:25)*(?:2F|3F|23))[^\s\"'<>\\&/?#@])*)(%(?:25)*40)"
)
"""A URL percent-encoded whole (``redis%3A%2F%2Fu%3Ap%40h``: a URL in another's query value or a form
field, as a client writes it), its scheme taken as :data:`_URL` takes one, and its user-info up to the
last ``%40`` before the encoded path, query or fragment (``%2F``, ``%3F``, ``%23``) or the end of the
value: masked whole, as :func:`redact_url` masks a plain URL's. Until session s48 (round 16) only a
plain ``://`` was found, and an encoded URL's password went through outside a plain URL's query.

Since round 17 (session s49) also a URL percent-encoded twice or more (``redis%253A%252F%252Fu%253Ap%2540h``:
a URL in a query value of a URL that is itself a query value, or encoded twice by a client), each
``%`` followed by any number of ``25`` (an encoded ``%``); its password went through, and
:func:`needs_redaction` judged the text clean. The encoded ``@`` is kept as it was written."""
_ENCODED_URL_MARK: Final = re.compile(r"%(?:25)*40")
"""What an encoded user-info needs (an encoded ``@``, once or more, digits only, whatever the case): the
cheap test, a search led by ``%``."""
_URL_PARTS: Final = re.compile(r"(?s)([^:]*://)(?:([^/?#]*)@)?([^?#]*)(?:\?([^#]*))?(?:#(.*))?")
"""Scheme, user-info (up to the last ``@`` before the path: a password may hold an unencoded ``@``),
host and path, query, fragment."""
_NEWLINE: Final = r"(?:\\n|\r?\n)"
"""A newline, real or escaped (``\\n`` in a ``repr`` or a JSON string)."""
_PEM_BLOCK: Final = re.compile(
    r"-----BEGIN [A-Z0-9 ]+-----"
    r"(?:(?:(?!-----BEGIN ).)*?-----END [A-Z0-9 ]+-----(?:" + _NEWLINE + r"(?=[\"']|\Z))?"
    r"|(?:" + _NEWLINE + r"[A-Za-z-]+: [^\r\n\\]*)*"
    r"(?:(?:" + _NEWLINE + r"|[ \t])(?:[A-Za-z0-9+/=]{64}|[A-Za-z0-9+/=]{76})(?=" + _NEWLINE + r"))*"
    r"(?:(?:" + _NEWLINE + r"|[ \t])[A-Za-z0-9+/=]+(?=" + _NEWLINE + r"|\Z|[\s\"'.,;)\]}]))?)",
    re.DOTALL,
)
"""A PEM block, its newlines real or escaped, up to its END line (never past another BEGIN line).
Every label, not only ``PRIVATE KEY``: a key pasted where a certificate belongs is labelled as one,
and a certificate in a log line says nothing its ARN does not. The newline that ends a PEM file goes
with it when a quote or the end of the text follows (``Value '[REDACTED]' at``, not
``'[REDACTED]\\n'``); before other text it stays, to keep the lines.

A block cut off before its END line (a log line cut at 4 KiB) is masked to the end of its body:
the BEGIN line, any ``Proc-Type:``/``DEK-Info:`` header lines, the full-length (64 or 76 character)
base64 lines and the one shorter line after them, where the cut fell. Until session s45 it was masked
to the end of the text, and every log line after it was lost."""
_ENCODED_KEY: Final = re.compile(
    r"(?<![A-Za-z0-9+/])(?:LS0tLS1CRUdJT|M[GH]|MI[E-L])(?:[A-Za-z0-9+/]|\\n|\n){60,}={0,2}"
)
"""Base64 of key material without its PEM armour: a whole PEM encoded again (``LS0tLS1CRUdJT`` is
``-----BEGIN``; how a JSON API such as ACM's ``ImportCertificate`` carries a blob, which botocore logs at
DEBUG) or a DER structure (a PEM body with its newlines taken out), 64 characters or more. Every key
and certificate is an ASN.1 SEQUENCE (``0x30``): ``MI[E-L]`` with a one- or two-byte length (RSA,
PKCS#8, certificates), ``M[GH]`` with a short one of 96-127 bytes (a P-256 key in SEC 1 form). Not only a
context rule (:data:`_KEY_ASSIGNMENT`): the request body that leaked names the key, but an error
quoting the value (``Value '...' at 'privateKey'``) or a repr of the bytes does not."""
_ENCODED_PEM: Final = re.compile(
    r"(?<![A-Za-z0-9+/])(?:[A-Za-z0-9+/]|\\n|\n)*?(?:LS0tLS1CRUdJ|0tLS0tQkVHSU4|tLS0tLUJFR0lO)"
    r"(?:[A-Za-z0-9+/]|\\n|\n)*={0,2}"
)
"""A base64 run holding an encoded ``-----BEGIN`` anywhere in it, masked whole: the base64 of a PEM
with text before its BEGIN line (``Bag Attributes``/``localKeyID`` lines, as ``openssl pkcs12``
writes a bundle, or a certificate chain with the key after it), which puts the BEGIN line's base64
at any of its three alignments (``LS0tLS1CRUdJ``, ``0tLS0tQkVHSU4``, ``tLS0tLUJFR0lO``).
:data:`_ENCODED_KEY` finds a run only by how it starts; before session s45 these went through
:func:`redact`. A PEM or key in hex: :data:`_HEX_KEY`, with its own cheap test (not a trigger: a fresh
request id, 32 hex digits, is judged clean by its alphabet in :mod:`igw.gateway.access_log`)."""
_LOCAL_KEY_ID: Final = re.compile(r"(?i)\b(localKeyID:[ \t]*)([0-9A-F]{2}(?:[ :]?[0-9A-F]{2})*)")
"""The ``localKeyID`` bag attribute of a PKCS#12 or ``openssl pkcs12`` PEM bundle (``localKeyID: 01
AB ...``): a digest of the certificate, not secret by itself, but it ties the line to the key it
labels, and only a key dump prints it."""
_LONE_RUN: Final = re.compile(
    r"(?:(?=[A-Za-z0-9+/]*[0-9])(?=[A-Za-z0-9+/]*[a-z])(?=[A-Za-z0-9+/]*[A-Z])[A-Za-z0-9+/]{43,}={0,2}"
    r"|[0-9A-Fa-f]{64,})"
)
"""A key on a line of its own, without a name: 43 or more base64 characters mixing capitals, small
letters and digits (a 32-byte HMAC or API key is 43 or 44: ``9ByH7hYf...VvI6k=``) or 64 or more hex
digits (a 32-byte key in hex). See :data:`_LONE_LINE`."""
_LONE_LINE: Final = re.compile(
    r"(?:^|(?<=\n)|(?<=\\n))[ \t]*(" + _LONE_RUN.pattern + r")[ \t]*(?=\r?\n|\\n|\Z)"
)
""":data:`_LONE_RUN` filling a line (real or escaped newlines, or the whole text), as the kubernetes
client's and botocore's DEBUG dumps and a printed key file put one. Not inside other text: request
IDs and UUIDs have hyphens, a commit hash is 40 hex digits, a trace ID 32, and a digest comes after
``sha256:``; a bare 64-digit hex line is masked, as a hex key cannot be told from a digest."""
_LONE_MIN_CHARS: Final = 43
_LONE_HINT: Final = re.compile(r"[A-Za-z0-9+/]{43}")
"""What a line needs for :data:`_LONE_LINE` to match: the cheap scan before the search (a traceback's
lines are short words, and the search tries every position)."""


def _lone_secret(text: str) -> bool:
    """Whether ``text`` may hold a :data:`_LONE_LINE`: the cheap test before the search."""
    if len(text) < _LONE_MIN_CHARS:
        return False
    if "\n" in text or "\\n" in text:
        return _LONE_HINT.search(text) is not None and _LONE_LINE.search(text) is not None
    return _LONE_RUN.fullmatch(text.strip(" \t")) is not None


_KEY_ASSIGNMENT: Final = re.compile(
    r"(?i)\b(private_?key|tls\.key|key\.pem)([\"']?\s*[:=]\s*b?[\"']?)([A-Za-z0-9+/=]{40,})"
)
"""A base64 or hex value of 40 characters or more assigned to a private key's name (``"PrivateKey":
"..."``, ``tls.key: ...``): the shortest key worth the name (a 32-byte scalar) is 44 in base64. A
path (``private_key=/etc/tls/key.pem``) has dots or hyphens and stays, to say which file."""
_BASE64_RUN: Final = re.compile(r"(?:[A-Za-z0-9+/]|\\n|\n){48,}={0,2}")
"""48 or more characters of base64 or hex (escaped or real newlines included), whatever they start
with: what :func:`redact_quoting_keys` masks besides :func:`redact`'s patterns."""
_TRIGGERS: Final = (
    "authorization",
    "cookie",
    "api-key",
    "apikey",
    "x-auth-token",
    "security-token",
    "secret_access_key",
    "session_token",
    "security_token",
    "akia",
    "asia",
    "bearer",
    "basic",
    "eyj",
    "-----begin",
    "ls0tls1crudj",
    "0tls0tqkvhsu4",
    "tls0tlujfr0lo",
    "localkeyid",
    "mg",
    "mh",
    "mie",
    "mif",
    "mig",
    "mih",
    "mii",
    "mij",
    "mik",
    "mil",
    "private",
    "tls.key",
    "key.pem",
)
"""Lower-case substrings at least one of which every pattern above needs in order to match. Most
lines (the access log's, one per request) contain none, and the scan for them is several times
cheaper than running the case-insensitive patterns over the line."""


_SECRET_FIELD: Final = (
    r"[a-z0-9_-]*(?:token|secrets?|password|passwd|passphrase|pwd|credentials?|assertion|api_?key"
    r"|access_?key|code_verifier|secret_?string|secret_?binary)"
)
"""A field name that says its value is a credential (``refresh_token``, ``client_secret``,
``clientSecret``, ``password``, ``client_assertion``, ``api_key``, ``code_verifier``; since session
s47 ``credentials``/``credential``, ``secrets``, ``passphrase`` and ``pwd``, which went through): not
``max_tokens``, ``token_type``, ``secret_name`` or ``passwordEnv``, whose names go on after the word.
The one list of names: the form (:data:`_FORM_FIELD`), JSON and dict (:data:`_QUOTED_FIELD`,
:data:`_ESCAPED_FIELD`) rules and their hints (:data:`_FIELD_WORDS`) are built from it. OAuth 2.0's
(RFC 6749: ``access_token``, ``refresh_token``, ``client_secret``, ``password``, ``code``; RFC 7521
``client_assertion``/``assertion``; RFC 7636 ``code_verifier``; RFC 8628 ``device_code``) and AWS's
credential file and environment names (``aws_secret_access_key``, ``aws_session_token``, boto's
``SecretAccessKey``/``SessionToken``) all end in one of its words. Secrets Manager's ``SecretString`` and
``SecretBinary`` (a ``PutSecretValue``/``CreateSecret`` request's body, botocore's DEBUG ``params``)
since session s50 (round 22): the value went through :func:`redact`, masked by :func:`redact_value`
alone."""
_NAME_WORD: Final = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
"""A word of a field's name: camel case (``tokensPerMinute``), ``_``, ``-``, ``.`` or upper case
(``CHARS_PER_TOKEN``) between words."""
_COUNT_TEXT: Final = (
    "max min per minute minutes second seconds hour hours day days burst budget count counts num number "
    "total prompt completion completions limit limits rate ids usage remaining length len size bytes "
    "capacity refill bucket window reasoning prediction est estimated reserved inflight pending batched "
    "threshold million"
)
_COUNT_WORDS: Final = frozenset(_COUNT_TEXT.split())
"""Words that, next to ``token``/``tokens`` in a name, say its value is a number of tokens (a count, a
limit, a rate, a budget), not a token: ``max_tokens``, ``max_completion_tokens``, ``prompt_tokens``,
``total_tokens``, ``num_tokens``, ``tokensPerMinute``, ``tokenBurst``, ``token_budget``,
``maxTokenBytes``, ``x-ratelimit-remaining-tokens``, ``prompt_token_ids`` (OpenAI's and vLLM's token
ids are numbers). Not ``id`` (``id_token`` is an OIDC token; ``token_id`` stays masked too)."""
_PLURAL_COUNT_TEXT: Final = "input output cached audio generation generated new prefix"
_PLURAL_COUNT_WORDS: Final = frozenset(_PLURAL_COUNT_TEXT.split())
"""Words that say a count next to ``tokens`` only (``input_tokens``, ``cached_tokens``,
``max_new_tokens``): ``input_token`` (GSS-API), ``cached_token`` or ``new_token`` may hold a token."""
_CREDENTIAL_TEXT: Final = (
    "secret secrets password passwd passphrase pwd credential credentials key apikey assertion verifier "
    "access refresh id session bearer auth oauth jwt api hf csrf security"
)
_CREDENTIAL_WORDS: Final = frozenset(_CREDENTIAL_TEXT.split())
"""Words that keep a name holding a count word a credential's name (``refresh_token_max``,
``api_token_limit``): a name that says which credential it is may hold one."""


@functools.cache
def names_a_count(name: str) -> bool:
    """Whether a field's name holding ``token`` says its value is a number of tokens, not a credential:
    ``token`` or ``tokens`` as a word of it, with a word of :data:`_COUNT_WORDS` (or of
    :data:`_PLURAL_COUNT_WORDS` beside ``tokens``) and none of :data:`_CREDENTIAL_WORDS`.

    The one rule :func:`redact` (a name ending in ``token``: ``chars_per_token``) and
    :func:`redact_value` (``token`` anywhere in it) keep such a value by. Until session s49 (round 18)
    :func:`redact_value` masked every name holding ``token``, and a path-named configuration error
    (``igw validate``, the add-on's values, the operator's conditions) showed ``{"tokensPerMinute":
    [REDACTED], "tokenBurst": [REDACTED]}`` and an OpenAI request's ``max_tokens: [REDACTED]``. A dotted
    name is judged from its last segment holding ``token`` (``rateLimits.token`` is a token; ``token.maxAge``
    is not)."""
    segments = name.split(".")
    holding = [i for i, segment in enumerate(segments) if "token" in segment.lower()]
    if not holding:
        return False
    words = [word.lower() for word in _NAME_WORD.findall(".".join(segments[holding[-1] :]))]
    if "token" not in words and "tokens" not in words:
        return False
    if _CREDENTIAL_WORDS.intersection(words):
        return False
    counts = _COUNT_WORDS | _PLURAL_COUNT_WORDS if "tokens" in words else _COUNT_WORDS
    return not counts.isdisjoint(words)


_FORM_FIELD: Final = re.compile(
    r"(?i)(?:(?<=%[0-9A-F]{2})|(?<=%25[0-9A-F]{2})|(?<![A-Za-z0-9_%-]))"
    r"(?:(" + _SECRET_FIELD + r"|[a-z0-9_-]*api-key)((?:\]|%5D|%255D)?(?:=|%3D|%253D))"
    r"(?!(?:[\[({]\s*)*\\*[bru]{0,2}[\"']|(?:[\[({]\s*)+-?[0-9])"
    r"((?:(?!%26|,(?:\s|\Z))[^&\s\"'<>\\])+)"
    r"|((?:device_)?code)(=|%3D)((?:(?!%26)[^&\s\"'<>\\])+)(?=&|%26))"
    r"|(?:(?<=&)|(?<=%26))((?:device_)?code)(=|%3D)((?:(?!%26)[^&\s\"'<>\\])+)"
)
"""A secret-named field of a form body (``grant_type=refresh_token&refresh_token=...&client_secret=...``,
percent-encoded again as ``%26refresh_token%3D...`` inside another value), its value masked up to the
next ``&``, blank, quote or backslash (a repr's escape: a form value has them percent-encoded).
``code`` (an authorization or device code) only next to another field, ``&code=`` or ``code=...&``: a
``code=503`` in a log line is a status. requests_oauthlib logs the kubernetes client's OIDC refresh body
so at DEBUG (``IGW_DEBUG_THIRD_PARTY=1``); before session s45 :func:`redact` masked ``name=value``
only in a URL's query, and the refresh token and client secret went to the logs. A value
opening with a quote or a bracket and a quote (``password='x'``, ``token=['x'``), or a bracket and a number
(``password=[1234, 5678]``, since session s47 round 10) is :data:`_KWARG_FIELD`'s or
:data:`_OPEN_CONTAINER`'s: taken here, it masked the ``b`` or ``[`` only and showed the rest. A comma
before a blank ends the value (a repr's separator, ``Config(password=None, token=...)``, which a form
value has percent-encoded), and so does a closing bracket of a call around it (:func:`_mask_form_field`);
until session s47 (round 9) both were masked with it. Other fields (``status=200``, ``model=llama``) stay.
Since round 21 (session s50) also a dotted or indexed name (Helm's ``--set redis.password=...``, a
Rails-style form's ``user[password]=...``), whose value went through: a ``.`` before the name or a
``]`` after it had ended the match. Since round 23 (session s50) the name may follow any percent-encoded
character, once or twice encoded (``user%5Bpassword%5D=...``, ``a%20password%3D...``, ``%255B``), its
``]`` and ``=`` may be encoded (``%5D``, ``%3D``, twice: ``%255D``, ``%253D``), and ``api-key`` is a
name's word (``x-api-key%3D...``): each went through every path."""
_FIELD_WORDS: Final = (
    "token",
    "secret",
    "secrets",
    "password",
    "passwd",
    "passphrase",
    "pwd",
    "credential",
    "credentials",
    "assertion",
    "secretstring",
    "secret_string",
    "secretbinary",
    "secret_binary",
)
"""The words of :data:`_SECRET_FIELD` a field's name ends with, for the hints below (the key names
each rule adds are in :data:`_FORM_WORDS` and :data:`_QUOTED_WORDS`)."""
_FORM_WORDS: Final = (
    *_FIELD_WORDS,
    "apikey",
    "api_key",
    "api-key",
    "access_key",
    "accesskey",
    "code",
    "code_verifier",
)


def _last_letters(words: tuple[str, ...]) -> str:
    """The character class of the last letters of ``words``: the hints' first, cheap look-behind."""
    return "[" + "".join(sorted({word[-1] for word in words})) + "]"


_FORM_HINT: Final = re.compile(
    f"=(?<={_last_letters(_FORM_WORDS)[:-1]}\\]d]=)(?:"
    + "|".join(f"(?<={word}=)|(?<={word}\\]=)|(?<={word}%5d=)|(?<={word}%255d=)" for word in _FORM_WORDS)
    + ")"
)
_ENCODED_FORM_HINT: Final = re.compile(
    "%(?:25)?3d(?:"
    + "|".join(
        f"(?<={word}{close}{equals})"
        for word in _FORM_WORDS
        for close in ("", "\\]", "%5d", "%255d")
        for equals in ("%3d", "%253d")
    )
    + ")"
)
"""What a lower-cased text needs for :data:`_FORM_FIELD` to match (a secret word right before ``=`` or
``%3D``): searches led by that literal, each ``=`` first checked for the last letter of one of the
words (:func:`_last_letters`), which cost a fraction of a microsecond on a line without one, where looking for
the words themselves cost several."""
_QUOTED_NAME: Final = _SECRET_FIELD + r"|[a-z0-9_-]*(?:private|secret)_?key|authorization|device_?code"
""":data:`_SECRET_FIELD`, and ``private_key``/``privateKey``, ``secretKey``, ``Authorization`` and
``device_code`` (RFC 8628's device authorization response; not ``code``, an error's code in a JSON
body): in a JSON object or dict repr their value is the credential (a path there is masked too,
unlike in a form field, where ``private_key=/etc/igw/tls/key.pem`` names the file)."""
_STRING: Final = r"(?:\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*')"
"""A JSON string or a Python string's repr, in double or single quotes, with its escapes."""
_ESCAPED_STRING: Final = r"\1\2(?:(?!(?<!\\)\1\2)[^\n])*(?<!\\)\1\2"
"""A JSON string inside another string (``\\"hunter2\\"``): its quotes (group 2: ``"``, or ``'`` of a
dict's repr inside a repr, ``\\'hunter2\\'``) after the backslashes of group 1 (one in a JSON string,
two in its repr), up to the next such quote not after one backslash more (an
escaped quote in the value, ``\\\\\\"``). A value ending in an escaped backslash is masked past its end
(to the next such quote): more masked, nothing shown."""
_SCALAR: Final = r"(?:-?[0-9][0-9.eE+-]*|null|true|false|None|True|False)"
_NUMBER: Final = r"-?[0-9][0-9.eE+-]*(?![0-9A-Za-z_.])"
"""A number as a secret-named field's whole value (``"password": 12345678``, a PIN or numeric key):
masked since session s47, where it went to the logs as it was (a string value was masked). Only in an
object or dict (the name after ``{`` or ``,``): ``error "token" : 401`` is a status."""


def _container(string: str) -> str:
    """The value of a secret-named field besides a string: an array or tuple of strings and scalars
    (``"password": ["a", "b"]``), or an object or dict one level deep whose values are such
    (``"client_secret": {"value": "..."}``); ``string`` is how a string is written there."""
    item = f"(?:{string}|{_SCALAR})"
    items = rf"\s*(?:{item}(?:\s*,\s*{item})*\s*,?\s*)?"
    pairs = rf"\s*(?:{string}\s*:\s*{item}(?:\s*,\s*{string}\s*:\s*{item})*\s*,?\s*)?"
    return rf"\[{items}\]|\({items}\)|\{{{pairs}\}}"


_QUOTED_FIELD: Final = re.compile(
    r"(?i)()([\"'])("
    + _QUOTED_NAME
    + r")(\2\s*:\s*)("
    + _STRING
    + "|"
    + _container(_STRING)
    + "|"
    + _NUMBER
    + ")"
)
"""A secret-named field of a JSON object or a dict's repr with a string value: an OAuth token response
(``{"access_token": "...", "refresh_token": "..."}``) as requests_oauthlib logs it, ``Response headers
were ... and content ...``, the token dict (``'refresh_token': '...'``), a request body logged whole
(``{"password": "...", "api_key": "..."}``). Before session s46 it ran only when another trigger
was there (``"token_type": "Bearer"``), and a body with ``"password"`` or ``"client_secret"`` and no
other trigger went to the logs as it was. Since session s46 an array, tuple or flat object as the
value too (:func:`_container`): every string in it is masked (an object's keys kept); before,
``"password": ["hunter2"]`` went through. Group 1 is empty (:data:`_ESCAPED_FIELD`'s backslashes)."""
_ESCAPED_FIELD: Final = re.compile(
    r"(?i)(\\+)([\"'])("
    + _QUOTED_NAME
    + r")(\1\2\s*:\s*)("
    + _ESCAPED_STRING
    + "|"
    + _container(_ESCAPED_STRING)
    + "|"
    + _NUMBER
    + ")"
)
""":data:`_QUOTED_FIELD` in a JSON text held in a string (``{\\"password\\": \\"x\\"}``): a request body
logged as a JSON string inside a JSON log line, or the repr of one (two backslashes). Its quotes
have backslashes before them, and until session s46 the field went through as it was; a dict's repr
inside a string's repr (``\\'password\\': \\'x\\'``, single quotes) until session s47."""
_CUT_FIELD: Final = re.compile(
    r"(?i)(\\*)([\"'])(" + _QUOTED_NAME + r")(\1\2\s*:\s*\1\2)(?:(?!(?<!\\)\1\2)[^\r\n])*(?=\r?\n|\Z)"
)
"""A secret-named field of a JSON object or dict repr (escaped or not) whose string value has no
closing quote before the end of its line: a line cut inside the value (at 4 KiB, or by whatever
quoted it short). :data:`_QUOTED_FIELD` needs the closing quote, and until session s47 the value's
first part went through (``{"password": "hunter2`` as it was); now the rest of the line is masked.
Run where :func:`_left_open` finds such a field whose value was not masked already. Until session
s47 (round 11) only where a kind of quote was left odd in the text: a stray quote before the field
(an error text ``token" {"password": "hunter2``) made the count even, and the value went through."""


def _mask_cut_field(found: re.Match[str]) -> str:
    """A :data:`_CUT_FIELD` with its value masked to the end of its line, or to the end of the string
    that holds it (:func:`_enclosing_end`), which is kept; as it is when the name counts tokens
    (:func:`names_a_count`)."""
    if names_a_count(found.group(3)):
        return found.group(0)
    kept = _enclosing_end(found, found.end(4), found.group(1), found.group(2))
    field = found.group(1) + found.group(2) + found.group(3) + found.group(4)
    return f"{field}{MASK}{found.string[kept : found.end()]}"


_UNESCAPED_DOUBLE_QUOTE: Final = re.compile(r'(?<!\\)"')
_STRING_END: Final = re.compile(r'(?<!\\)"(?=[\s,:}\]]|\Z)')
_QUOTE_RUN: Final = {quote: re.compile(r"(\\*)" + quote) for quote in "'\""}


def _enclosing_end(found: re.Match[str], start: int, escape: str, quote: str) -> int:
    """Where, in the text a cut value's rule took (``found``, the value from ``start``), the string
    holding that value ends: from there the text is kept, not masked (:func:`_string_end`)."""
    return _string_end(found.string, found.start(), start, found.end(), escape, quote)


def _string_end(text: str, field: int, start: int, stop: int, escape: str, quote: str) -> int:
    """Where the string holding a cut value (its field or repr from ``field``, the value from ``start``,
    cut at ``stop``; its quotes ``quote`` after ``escape``) ends before ``stop``, or ``stop``.

    A value cut before its closing quote is masked to the end of its line; but where the field is
    itself inside a string (a JSON string's ``{\\"password\\": \\"hunter2``, or a dict repr's
    ``{'password': 'hunter2`` in a JSON line's ``"error"``), that string's closing quote and the rest of
    the line went with it until session s48 (round 12): the JSON was broken and the fields after it
    lost, on every line outside :func:`igw.gateway.redaction.redact_line`'s per-string path (a prefixed
    log format, a line that is not JSON). A value whose quotes are escaped (``escape``) ends at the
    first such quote with fewer backslashes before it, which cannot be in the value; a value in single
    quotes inside a double-quoted string (an odd count of unescaped ``"`` before the field) at the
    first unescaped ``"`` that a separator or the end of the text follows. Since round 13 also a key's
    cut bytes repr (:func:`_mask_bytes_repr`) and a cut array or object (:func:`_mask_containers`),
    which still took the string's end with them."""
    if escape:
        for run in _QUOTE_RUN[quote].finditer(text, start, stop):
            if len(run.group(1)) < len(escape):
                return run.start()
        return stop
    if quote == "'" and len(_UNESCAPED_DOUBLE_QUOTE.findall(text, 0, field)) % 2:
        end = _STRING_END.search(text, start, stop)
        return stop if end is None else end.start()
    return stop


_OPEN_VALUE: Final = re.compile(r"\s*(\\*)([\"'])(?!" + re.escape(MASK) + r"\1\2)")
"""A value opening with a quote that is not a masked string (``"[REDACTED]"``, as :data:`_QUOTED_FIELD`
writes a closed one)."""


def _left_open(text: str) -> bool:
    """Whether ``text`` may hold a :data:`_CUT_FIELD`: a secret-named field (:data:`_QUOTED_HINT`,
    :data:`_ESCAPED_HINT`) whose quoted value is not masked yet, the cheap test before it (the
    pattern tries its names at every quote, which doubled a JSON body's redaction)."""
    lowered = text.lower()
    for hints in (_QUOTED_HINT, _ESCAPED_HINT):
        for hint in hints.finditer(lowered):
            if _OPEN_VALUE.match(text, hint.end()):
                return True
    return False


_QUOTED_WORDS: Final = (*_FIELD_WORDS, "key", "verifier", "authorization", "code")
_QUOTED_LAST: Final = _last_letters(_QUOTED_WORDS)


def _behind_a_word(tail: str) -> str:
    """Lookbehinds, one per word of :data:`_QUOTED_WORDS` followed by ``tail`` (regex text), joined as
    alternatives: the hints' exact check once their cheap test of a word's last letter passed."""
    return "|".join(f"(?<={word}{tail})" for word in _QUOTED_WORDS)


_QUOTED_HINT: Final = re.compile(
    rf":(?<={_QUOTED_LAST}[\"']:)(?:"
    + _behind_a_word(".:")
    + rf")|:(?<={_QUOTED_LAST}[\"'] :)(?:"
    + _behind_a_word(". :")
    + ")"
)
"""What a lower-cased text needs for :data:`_QUOTED_FIELD` to match (one of the words, a quote and a
colon, a blank between them or none): a search led by the colon, each one checked for a quote after
the last letter of a word (``[nteyrd]``) first, so a JSON line of other fields costs a fraction of a
microsecond, where a search led by the quote cost three times as much."""
_ESCAPED_HINT: Final = re.compile(
    ":(?:"
    + "|".join(
        rf"(?<=\\[\"']{blank}:)(?:"
        + "|".join(
            rf"(?<={_QUOTED_LAST}{slashes}[\"']{blank}:)(?:"
            + _behind_a_word(rf"{slashes}[\"']{blank}:")
            + ")"
            for slashes in (r"\\", r"\\\\", r"\\\\\\")
        )
        + ")"
        for blank in ("", " ")
    )
    + ")"
)
"""What a lower-cased text needs for :data:`_ESCAPED_FIELD` to match (one of :data:`_QUOTED_WORDS`, one
to three backslashes, a quote and a colon, a blank before it or none): led by the colon and checked
for the backslash and quote first, as :data:`_QUOTED_HINT`, so escaped JSON of other fields
(``{\\"error\\": ...}`` from a backend, quoted in a log line) costs a fraction of a microsecond."""
_KWARG_FIELD: Final = re.compile(
    r"(?i)(?<![A-Za-z0-9_-])("
    + _QUOTED_NAME
    + r")([ \t]*[=:][ \t]*[bru]{0,2})("
    + _STRING
    + "|"
    + _container(_STRING)
    + r"|([\"'])(?:(?!\4)[^\\\r\n]|\\.)*\\?(?=\r?\n|\Z))"
)
"""A secret-named keyword argument with a string value, as a dataclass's, a ``namedtuple``'s or a
call's repr writes it (``Credentials(access_key='...', secret_key='...', token='...')``,
``Config(password="...")``, ``password=b'...'``), an array, tuple or flat dict of strings
(:func:`_container`), or a string cut before its closing quote (to the end of the line). The names
of :data:`_QUOTED_NAME`; before session s47 only a ``name=value`` without quotes (:data:`_FORM_FIELD`)
was masked, and a repr's quoted values went through."""
_ESCAPED_KWARG: Final = re.compile(
    r"(?i)(?<![A-Za-z0-9_-])("
    + _QUOTED_NAME
    + r")([ \t]*[=:][ \t]*[bru]{0,2})(\\+)([\"'])(?:(?!(?<!\\)\3\4)[^\r\n])*(?:(?<!\\)\3\4|(?=\r?\n|\Z))"
)
""":data:`_KWARG_FIELD` in a repr held in a JSON string or another repr (``Config(password=\\"x\\")``, its
quotes escaped; the access log's JSON form of a repr), its string masked, quotes kept; up to the next
such quote not after one backslash more, or, cut off, the end of the line."""
_KWARG_HINT: Final = re.compile(
    rf"[=:](?=[ \t]*[bru]{{0,2}}\\*[\"'\[({{])(?<={_QUOTED_LAST}[=:])(?:" + _behind_a_word("[=:]") + ")"
)
"""What a lower-cased text needs for :data:`_KWARG_FIELD` to match: one of :data:`_QUOTED_WORDS`, ``=``
and a quote or bracket; led by the ``=``, as :data:`_FORM_HINT`. Blanks before the ``=``:
:data:`_SPACED_KWARG_HINT`."""
_SPACED_KWARG_HINT: Final = re.compile(
    "(?:" + "|".join(_QUOTED_WORDS) + r")[ \t]+[=:][ \t]*[bru]{0,2}\\*[\"'\[({]"
)
""":data:`_KWARG_HINT` for an assignment with blanks before its ``=`` (``password = "..."``, ``token =
'...'``: a source line, a TOML or Python config dump), searched only in a text holding ``" ="`` or
``"\t="``."""

_CONFIG_WORDS: Final = "(?:" + "|".join(_QUOTED_WORDS) + ")"
_LINE_START: Final = r"(?:^|(?<=\n)|(?<=\\n)|(?<=[\"']))"
_PATH_SEGMENT: Final = r"[a-z0-9_-]+(?:\[[a-z0-9_-]*\])*"
_CONFIG_LINE: Final = re.compile(
    r"(?i)((?:" + _LINE_START + r"[ \t]*(?:-[ \t]+)?|(?<=[ \t(,])(?=" + _PATH_SEGMENT + r"\.))"
    r"(?P<path>(?:" + _PATH_SEGMENT + r"\.)+)?"
    r"(?:" + _QUOTED_NAME + r")[ \t]*(?P<sep>[:=])[ \t]*)"
    r"(?P<value>(?:(?!\\[nr])[^\s\"'\[({])(?:(?!\\[nr])[^\s\"'])*)"
    r"(?(path)(?=\s|\Z|\\[nr])|(?=[ \t]*(?:\r?\n|\\[nr]|\Z|\\*[\"'](?:[\s,}\]]|\Z))|[ \t]+[#;]))"
)
"""A secret-named key of a configuration line and its unquoted value, alone on its line (a YAML
``password: hunter2``, an INI or ``.env`` dump's ``password = hunter2``, ``token: abc.def``, indented
or a list item ``- token: ...``; newlines real or escaped; or a quoted string's whole text, ``"error":
"password: hunter2"``). Quoted values are :data:`_KWARG_FIELD`'s,
``name=value`` without blanks :data:`_FORM_FIELD`'s; until session s48 (round 12) these went through,
kept so that prose (``token: expired``) stays. The line shape tells them apart: the key starts its
line and the value is one run without blanks that ends it, so ``the password = field is required``,
``password: none given`` and ``Error: token: expired`` stay; after a ``:`` a value that reads as a
word (letters only, at most capitalised, shorter than :data:`WORD_MAX_CHARS`: ``token: expired``,
``password: none``) stays too (:func:`_mask_config_line`); after ``=`` it is masked, as ``token=expired``
is by the form rule. A comment after the value (``password = x  # prod``, ``token: abc123 ; note``,
after a blank) is kept and the value masked; until round 13 such a line went through whole. A dotted
path (``spec.redis.password: <value>``, ``auth[0].token: <value>``: a configuration error's location)
is a key wherever it is in a line, after a blank, ``(`` or ``,``, its value up to the next blank (a
word after ``:`` kept, as above); until session s50 (round 22) it had to start its line."""
_CONFIG_HINT: Final = re.compile(
    rf"[:=](?<={_QUOTED_LAST}[:=])(?:"
    + _behind_a_word("[:=]")
    + rf")|[:=](?<={_QUOTED_LAST}[ \t][:=])(?:"
    + _behind_a_word("[ \t][:=]")
    + r")|[:=](?<=[ \t][ \t][:=])"
)
"""What a lower-cased text needs for :data:`_CONFIG_LINE` to match (one of :data:`_QUOTED_WORDS`, a
blank or none, then ``:`` or ``=``; or two blanks before them, an aligned INI file): led by the
``:``/``=`` and checked for a word's last letter first, as :data:`_QUOTED_HINT`."""


_FIELD_HINT: Final = re.compile(
    rf"[:=](?:(?<={_QUOTED_LAST}[:=])(?:"
    + _behind_a_word("[:=]")
    + rf")|(?<={_QUOTED_LAST}[\"' \t][:=])(?:"
    + _behind_a_word(".[:=]")
    + rf")|(?<={_QUOTED_LAST}[\"'] [:=])(?:"
    + _behind_a_word(". [:=]")
    + r")|(?<=[ \t][ \t][:=]))"
)
"""What a lower-cased text needs for any of :data:`_QUOTED_HINT`, :data:`_KWARG_HINT`,
:data:`_SPACED_KWARG_HINT` and :data:`_CONFIG_HINT` to match (a superset of the four: a word of
:data:`_QUOTED_WORDS`, a quote or blank or none, then ``:`` or ``=``; a word, a quote and a blank before
them; or two blanks): one search led by ``:``/``=`` that a clean line fails, where it ran three
(round 12's configuration hint made a clean line's redaction about 10 % dearer). Only where it
matches are the rules' own hints searched."""


def _config_secrets(lowered: str) -> bool:
    """Whether a lower-cased text may hold a :data:`_CONFIG_LINE`: the cheap test before it runs."""
    return _CONFIG_HINT.search(lowered) is not None


def _config_changes(text: str) -> bool:
    """Whether :data:`_CONFIG_LINE` masks a value in ``text``: :func:`needs_redaction`'s test after the
    hint, so that prose the rule keeps (``token: expired``) is still judged clean."""
    return any(_mask_config_line(found) != found.group(0) for found in _CONFIG_LINE.finditer(text))


def _mask_config_line(found: re.Match[str]) -> str:
    """A :data:`_CONFIG_LINE` with its value masked, unless a ``:`` precedes a value that reads as a word
    or the name counts tokens (:func:`names_a_count`)."""
    value = found.group("value")
    if found.group("path"):  # a value that ends before a blank mid-line: a word may end in punctuation
        value = value.rstrip(":,;.)") or value
    if names_a_count(found.group(1).strip(" \t-:=")):
        return found.group(0)
    if found.group("sep") == ":" and value.isalpha() and value[1:].islower() and len(value) < WORD_MAX_CHARS:
        return found.group(0)
    return f"{found.group(1)}{MASK}"


def _keyword_secrets(lowered: str) -> bool:
    """Whether a lower-cased text may hold a :data:`_KWARG_FIELD`: the cheap test before it runs."""
    return _KWARG_HINT.search(lowered) is not None or (
        (" =" in lowered or "\t=" in lowered or " :" in lowered or "\t:" in lowered)
        and _SPACED_KWARG_HINT.search(lowered) is not None
    )


def _mask_escaped_kwarg(found: re.Match[str]) -> str:
    """An :data:`_ESCAPED_KWARG` with its string masked, its escaped quotes kept (the closing one only
    when it was there); as it is when the name counts tokens (:func:`names_a_count`)."""
    if names_a_count(found.group(1)):
        return found.group(0)
    quote = found.group(3) + found.group(4)
    closed = found.end(0) > found.end(4) and found.group(0).endswith(quote)
    if closed:
        return f"{found.group(1)}{found.group(2)}{quote}{MASK}{quote}"
    kept = _enclosing_end(found, found.end(4), found.group(3), found.group(4))
    return f"{found.group(1)}{found.group(2)}{quote}{MASK}{found.string[kept : found.end()]}"


def _mask_kwarg(found: re.Match[str]) -> str:
    """A :data:`_KWARG_FIELD` with every string of its value masked (quotes and brackets kept), or,
    cut off, its opening quote then :data:`MASK`; as it is when the name counts tokens
    (:func:`names_a_count`)."""
    if names_a_count(found.group(1)):
        return found.group(0)
    value = found.group(3)
    if found.group(4) is not None:
        kept = _enclosing_end(found, found.start(4) + 1, "", found.group(4))
        return f"{found.group(1)}{found.group(2)}{found.group(4)}{MASK}{found.string[kept : found.end()]}"
    first = _FIRST_QUOTE.search(value)
    quote = first.group(2) if first else "'"
    return f"{found.group(1)}{found.group(2)}{_STRINGS.sub(lambda s: _mask_string(s, '', quote), value)}"


_OPEN_CONTAINER: Final = re.compile(
    r"(?i)(?:(\\*)([\"'])(" + _QUOTED_NAME + r")(\1\2\s*:\s*)"
    r"|(?<![A-Za-z0-9_-])(" + _QUOTED_NAME + r")([ \t]*[=:][ \t]*))[\[({][ \t]*"
)
"""A secret-named field or keyword argument whose value is an array, tuple or object, up to its
opening bracket: :func:`_mask_containers` masks the strings of the value, whatever its depth."""
_BRACKETS: Final = str.maketrans("", "", "[](){}")
_FIRST_QUOTE: Final = re.compile(r"(\\*)([\"'])")


_CONTAINER_VALUE: Final = re.compile(r"[:=]\s*[\[({]")
_SECRET_NAME_END: Final = re.compile("(?:" + "|".join(_QUOTED_WORDS) + r")\\*[\"']?\Z")


def _secret_containers(text: str) -> bool:
    """Whether ``text`` may hold an :data:`_OPEN_CONTAINER`: a bracket after ``:`` or ``=`` whose name
    before ends in one of :data:`_QUOTED_WORDS`, the cheap test before :func:`_mask_containers` (led by
    the bracket: a search led by the name cost a JSON body of other arrays twice its redaction)."""
    if len(text) == len(text.translate(_BRACKETS)):
        return False
    for found in _CONTAINER_VALUE.finditer(text):
        before = text[max(0, found.start() - 48) : found.start()].rstrip()
        if _SECRET_NAME_END.search(before.lower()):
            return True
    return False


def _mask_containers(text: str) -> str:
    """``text`` with every string in the value of an :data:`_OPEN_CONTAINER` masked (an object's keys,
    scalars and brackets kept), to the bracket that closes it on its line however deep it nests
    (``"password": [["[REDACTED]"]]``, ``'token': {'a': {'b': '[REDACTED]'}}``), or, when the value does
    not close on its line (a line cut inside it, ``"password": ["hun``), from its opening bracket to
    the end of the line. An object under a ``credentials`` name is left to its own fields' names, as
    :func:`_mask_quoted_field` leaves it.

    :data:`_QUOTED_FIELD` and :data:`_KWARG_FIELD` take a value one level deep; until session s47
    (round 9) a deeper one went through whole, and until round 8 a cut one. The scan is one pass over
    the value's line, each string skipped whole."""
    shown: list[str] = []
    position = 0
    while (found := _OPEN_CONTAINER.search(text, position)) is not None:
        start, stop = found.end(), _line_end(text, found.end())
        if names_a_count(found.group(3) or found.group(5)):
            shown.append(text[position:start])
            position = start  # a number of tokens (``"per_token": [4, 8]``), not a credential
            continue
        escape, quote = found.group(1), found.group(2)
        if escape is None and (first := _FIRST_QUOTE.search(text, start, stop)) is not None:
            if first.group(1):
                escape, quote = first.groups()  # a repr in a JSON string: its quotes escaped
            else:
                quote = first.group(2)  # a keyword's value: its numbers masked in its strings' quotes
        escape = escape or ""
        strings = _escaped_strings(escape, quote) if escape else _STRINGS
        end = _closing(text, start, stop, escape, quote if escape else "'\"", strings)
        shown.append(text[position:start])
        if end is None:
            shown.append(MASK)
            position = _string_end(text, found.start(), start, stop, escape, quote or "")
        elif (
            found.group(3)
            and text[found.start(0) : start].rstrip().endswith("{")
            and _CREDENTIALS_NAME.fullmatch(found.group(3))
        ):
            position = start  # its fields are found by their own names
        else:
            masked = functools.partial(_mask_string, escape=escape, quote=quote or "'")
            shown.append(strings.sub(masked, text[start:end]))
            position = end
    shown.append(text[position:])
    return "".join(shown)


def _line_end(text: str, start: int) -> int:
    """Where the line holding ``start`` ends (its ``\r`` or ``\n``, or the end of the text)."""
    ends = [end for end in (text.find("\n", start), text.find("\r", start)) if end >= 0]
    return min(ends, default=len(text))


_CONTAINER_MARK: Final = re.compile(r"[\[\](){}\"'\\]")


def _closing(
    text: str, start: int, stop: int, escape: str, quotes: str, strings: re.Pattern[str]
) -> int | None:
    """Where a value opened before ``start`` ends in ``text[start:stop]``, after the bracket that closes
    it (its brackets balance outside its strings: ``strings``, in ``quotes`` after ``escape``), or
    ``None`` when it does not close there or a string is left open."""
    depth, position = 1, start
    while (mark := _CONTAINER_MARK.search(text, position, stop)) is not None:
        char, position = mark.group(0), mark.end()
        if char in "[({":
            depth += 1
        elif char in "])}":
            depth -= 1
            if depth == 0:
                return position
        elif (string := strings.match(text, mark.start(), stop)) is not None:
            position = string.end()
        elif text.startswith(tuple(escape + quote for quote in quotes), mark.start(), stop):
            return None
    return None


_DSN: Final = re.compile(
    r"(?<![A-Za-z0-9_.%+:/@-])([A-Za-z0-9_.%+-]+):(?!//)([^\s\"'<>]+)"
    r"@(?=(?:tcp|unix|udp)\(|(?!sha\d*:)[A-Za-z0-9.-]+(?::\d{1,5}(?![A-Za-z0-9])|/)|\[[0-9A-Fa-f:]+\])"
)
"""A data source name without a scheme (``user:p4ss@host:5432``, Go's MySQL ``user:p4ss@tcp(host)/db``,
``user:p4ss@host/db``): the password masked, the user kept to say which account. Only before a host
with a port or a path, a ``tcp(``/``unix(`` address or a bracketed IPv6 address: an e-mail address
(``alice@example.com``, no password before it, nor a port or path after) and an image or model
reference pinned by digest (``llama:v1@sha256:...``) stay. A password holding ``@`` is masked to the
last ``@`` before the host. A DSN with a scheme is :func:`redact_url`'s."""
_DSN_HINT: Final = re.compile(r"@(?:(?:tcp|unix|udp)\(|(?!sha\d*:)[A-Za-z0-9.-]+(?::\d|/)|\[)")
"""What a text needs for :data:`_DSN` to match: a search led by ``@``, which most lines lack."""


def _dsn_secrets(text: str) -> bool:
    """Whether ``text`` may hold a :data:`_DSN`: the cheap test before it runs."""
    return "@" in text and ":" in text and _DSN_HINT.search(text) is not None


_KEY_DUMP: Final = re.compile(
    r"(?i)((?:^|(?<=\n)|(?<=\\n))[ \t]*(?:priv|privateExponent|prime[12]|exponent[12]|coefficient):[ \t]*)"
    r"(?:(?:\r?\n|\\n)[ \t]+[0-9a-f]{1,2}(?::[0-9a-f]{1,2})*:?[ \t]*)+"
)
"""The private parts of an ``openssl pkey -text`` (``rsa``, ``ec``, ``genpkey -text``) dump: the lines
of colon-separated hex bytes after ``priv:`` (EC, Ed25519, DSA, DH), ``privateExponent:``, ``prime1:``,
``prime2:``, ``exponent1:``, ``exponent2:`` and ``coefficient:`` (RSA), newlines real or escaped;
``modulus:`` and ``pub:`` stay; a line cut short (a log line cut at 4 KiB) goes with the others.
Its trigger is the dump's ``Private-Key:`` header (``private``): a text holding only the tail of a
dump, without it, is not recognised."""


def _mask_dump(found: re.Match[str]) -> str:
    """A :data:`_KEY_DUMP` field: its label kept, its hex lines one masked line."""
    newline = "\\n" if found.group(0)[len(found.group(1)) :].startswith("\\n") else "\n"
    return f"{found.group(1)}{newline}    {MASK}"


def _mask_form_field(found: re.Match[str]) -> str:
    """A :data:`_FORM_FIELD` match with its value masked, its name and ``=`` kept, and the brackets
    that end it kept when they close one opened before the field (``Config(password=None)``: the
    call's ``)``, which a form value would have percent-encoded); as it is when the name counts
    tokens (:func:`names_a_count`)."""
    groups = [g for g in found.groups() if g is not None]
    if names_a_count(groups[0]):
        return found.group(0)
    value = groups[2]
    before = found.string[: found.start()]
    kept = len(value)
    while kept and (closer := value[kept - 1]) in _CLOSERS:
        opener = _CLOSERS[closer]
        extra = value.count(closer, 0, kept) - value.count(opener, 0, kept)  # closing none of the value's
        if extra <= 0 or extra > before.count(opener) - before.count(closer):
            break
        kept -= 1
    return f"{groups[0]}{groups[1]}{MASK}{value[kept:]}"


_CLOSERS: Final = {")": "(", "]": "[", "}": "{"}


def _mask_quoted_field(found: re.Match[str]) -> str:
    """A :data:`_QUOTED_FIELD` or :data:`_ESCAPED_FIELD` match with every string of its value masked
    (an object's keys kept), its name, quotes, brackets and scalars kept; as it is when the name
    counts tokens (:func:`names_a_count`)."""
    escape = found.group(1)
    if names_a_count(found.group(3)):
        return found.group(0)
    if found.group(5)[0] in "-0123456789":  # a number: a string in its place keeps the JSON valid
        if not found.string[: found.start()].rstrip().endswith(("{", ",")):
            return found.group(0)  # not an object's field (``error "token" : 401``): a status, kept
        masked = f"{escape}{found.group(2)}{MASK}{escape}{found.group(2)}"
        return f"{found.group(1)}{found.group(2)}{found.group(3)}{found.group(4)}{masked}"
    if found.group(5).startswith("{") and _CREDENTIALS_NAME.fullmatch(found.group(3)):
        inner = (_ESCAPED_FIELD if escape else _QUOTED_FIELD).sub(_mask_quoted_field, found.group(5))
        return f"{found.group(1)}{found.group(2)}{found.group(3)}{found.group(4)}{inner}"
    strings = _escaped_strings(escape, found.group(2)) if escape else _STRINGS
    value = strings.sub(lambda s: _mask_string(s, escape, found.group(2)), found.group(5))
    return f"{found.group(1)}{found.group(2)}{found.group(3)}{found.group(4)}{value}"


_CREDENTIALS_NAME: Final = re.compile(r"(?i)[a-z0-9_-]*credentials?")
"""A ``credentials`` field: its string or array value is masked, but an object under it has its own
names (``{"username": ..., "password": ...}``), masked each by its own, the user's name kept."""
_ITEM_NUMBER: Final = r"|(?<![A-Za-z0-9_.\\])-?[0-9][0-9.eE+-]*(?![0-9A-Za-z_.])(?!\s*:)"
"""A number among the items of a secret field's array, tuple or object (``"password": [1234, "x"]``), not
an object's key: masked as its strings are (:func:`_mask_string`) since session s47 (round 10), where it
went to the logs as it was."""
_STRINGS: Final = re.compile(f"({_STRING})(\\s*:)?" + _ITEM_NUMBER)
"""A string and, when it is an object's key, the colon after it; or a number (:data:`_ITEM_NUMBER`)."""


@functools.cache
def _escaped_strings(escape: str, quote: str) -> re.Pattern[str]:
    """:data:`_STRINGS` for strings in ``quote`` whose quotes have ``escape`` (backslashes) before them."""
    pattern = _ESCAPED_STRING.replace("\\1", re.escape(escape)).replace("\\2", re.escape(quote))
    return re.compile("(" + pattern + ")(\\s*:)?" + _ITEM_NUMBER)


def _mask_string(found: re.Match[str], escape: str, quote: str = "'") -> str:
    """A string of a secret field's value masked (its quotes kept), or an object's key as it is; a
    number (group 1 empty) made a masked string in ``quote`` (the field's own, so JSON stays JSON)."""
    string = found.group(1)
    if string is None:
        return f"{escape}{quote}{MASK}{escape}{quote}"
    if found.group(2) is not None:
        return found.group(0)
    quote = string[len(escape)]
    return f"{escape}{quote}{MASK}{escape}{quote}"


_HEX_KEY: Final = re.compile(
    r"30(?:[0-7][0-9a-f]|81[0-9a-f]{2}|82[0-9a-f]{4})"
    r"(?:02010[01](?:02|30)|02010104|02010330"
    r"|30(?:[0-7][0-9a-f]|81[0-9a-f]{2})06(?:092a864886f70d0105|0a2a864886f70d010c01))"
    r"|2d2d2d2d2d424547494e"
)
"""The start of a private key's DER in lower-case hex digits: an ASN.1 SEQUENCE (``30`` and its
length) holding version 0 or 1 then an AlgorithmIdentifier or an INTEGER (``020100 30``: PKCS#8, and
v2 ``020101 30``; ``020100 02``: PKCS#1 RSA, DSA), version 1 then an OCTET STRING (``020101 04``: an EC
key in SEC 1 form), version 3 then a SEQUENCE (``020103 30``: a PKCS#12 bundle), or a password-based
encryption algorithm (``06 09 2a864886f70d0105``, ``06 0a 2a864886f70d010c01``: an encrypted PKCS#8
key); or ``-----BEGIN`` (``2d2d2d2d2d424547494e``: a PEM file in hex, any label, as the PEM rule).
A certificate (``a003020102`` after its two SEQUENCE headers) is public and stays, and a digest,
request id or trace id matches none of these by chance (10 or more fixed digits)."""
_HEX_HINTS: Final = ("0201", "02 01", "02\n01", "02\\n01", "86f7", "86 f7", "2d2d", "2d 2d")
"""Lower-case substrings one of which a text needs for :data:`_HEX_KEY` to match in it: the version
field ``02 01`` (which a dump may split across a group or a line), ``86 f7`` of an encryption
algorithm's OID (an encrypted key has no version field), or two dashes. The cheap test before
:func:`_mask_hex_keys` runs."""
_HEX_RUN: Final = re.compile(r"(?<![0-9A-Fa-f])[0-9A-Fa-f]{64,}")
"""64 or more hex digits in a row (a DER key in hex inside a line: ``der=308204bd...``)."""
_REAL_BREAK: Final = re.compile(r"\r?\n")
_ANY_BREAK: Final = re.compile(r"\r?\n|(?<!\\)((?:\\\\)*)\\n")
"""A line break, real or escaped (``\\n`` after an even number of backslashes: ``\\\\n`` is an escaped
backslash then ``n``, as ``repr`` writes a characters column's ``\\n``); group 1 the escaped backslashes
before it, which stay with their line."""
_HEX_DUMP_LINE: Final = re.compile(
    r"[ \t]*(?:[0-9A-Fa-f]{6,8}:?[ \t]+)?"
    r"((?:[0-9A-Fa-f]{2})+(?:[ \t]{1,2}(?:[0-9A-Fa-f]{2})+)*)"
    r"(?:[ \t]{2,}[^\r\n]{1,40})?[ \t]*"
)
"""One line of a hex dump: an offset (``xxd``'s ``00000000:``, ``hexdump -C``'s, ``od``'s) or none
(``xxd -p``, ``od -An``), the bytes in groups of any even width, and ``xxd``'s or ``hexdump -C``'s
characters column (which shows a PEM's base64 16 characters a line: masked with the bytes); up to 40
characters, as a JSON string or a repr escapes each ``"`` or ``\\`` of its 16 (until session s50, round
22, three of them in a ``hexdump -C`` line ended the dump there, and the key's rest was shown)."""
_TRAILING_HEX: Final = re.compile(r"[0-9A-Fa-f]{2,}\Z")


def _hex_secrets(lowered: str) -> bool:
    """Whether a lower-cased text may hold a key in hex (:data:`_HEX_KEY`): the cheap test, each
    family of :data:`_HEX_HINTS` looked for only when its last two characters are there."""
    return (
        ("01" in lowered and any(hint in lowered for hint in _HEX_HINTS[:4]))
        or ("f7" in lowered and any(hint in lowered for hint in _HEX_HINTS[4:6]))
        or ("2d" in lowered and any(hint in lowered for hint in _HEX_HINTS[6:]))
    )


def _mask_hex_keys(text: str) -> str:
    """``text`` with every hex dump of a private key (:data:`_HEX_KEY`) masked: a block of dump lines
    (newlines real or escaped) whose bytes hold one becomes one :data:`MASK` line, the hex digits that
    end the line before it (``body: 3082...``, the dump's first line after a log prefix) masked with
    it; and a run of 64+ hex digits inside a line that holds one is masked. Other hex (digests, ids, a
    certificate) stays.

    A text with real line breaks is read by them first: a characters column may show the bytes ``5c
    6e`` as ``\\n``, which until session s50 (round 22) ended the dump as an escaped line break, and the
    key's lines after it went through (one RSA key DER in about 300, in ``hexdump -C`` or ``xxd``). Then
    escaped line breaks count too (a dump in a JSON string or a repr)."""
    if "\n" in text:
        text = _mask_hex_dumps(text, _REAL_BREAK)
    text = _mask_hex_dumps(text, _ANY_BREAK)
    return _HEX_RUN.sub(lambda m: MASK if _HEX_KEY.search(m.group(0).lower()) else m.group(0), text)


def _mask_hex_dumps(text: str, breaks_at: re.Pattern[str]) -> str:
    """:func:`_mask_hex_keys`' dumps, the text's lines ending at ``breaks_at``."""
    lines, breaks, start = [], [], 0
    for brk in breaks_at.finditer(text):
        cut = brk.end(1) if brk.lastindex else brk.start()
        lines.append(text[start:cut])
        breaks.append(text[cut : brk.end()])
        start = brk.end()
    lines.append(text[start:])
    index = 0
    while index < len(lines):
        found = _HEX_DUMP_LINE.fullmatch(lines[index])
        if found is None:
            index += 1
            continue
        end, digits = index, []
        while end < len(lines) and (found := _HEX_DUMP_LINE.fullmatch(lines[end])) is not None:
            digits.append(found.group(1))
            end += 1
        before = _TRAILING_HEX.search(lines[index - 1]) if index else None
        joined = "".join(digits).replace(" ", "").replace("\t", "").lower()
        if before is not None and _HEX_KEY.search(before.group(0).lower() + joined):
            lines[index - 1] = lines[index - 1][: before.start()] + MASK
            del lines[index:end], breaks[index - 1 : end - 1]
            continue
        if len(joined) >= 64 and _HEX_KEY.search(joined):
            lines[index:end] = [MASK]
            del breaks[index : end - 1]
            index += 1
            continue
        index = end
    return "".join(line + brk for line, brk in zip(lines, [*breaks, ""], strict=True))


_BYTES_REPR: Final = re.compile(
    r"(?<![A-Za-z0-9_])b(?:'((?:[^'\\\n]|\\.)*\\?)('?)|\"((?:[^\"\\\n]|\\.)*\\?)(\"?))"
)
"""A Python bytes repr, in single or double quotes, up to its closing quote or, cut off, the end of the
line: :func:`_mask_bytes_repr` decides whether it holds a key."""
_BYTES_REPR_HINTS: Final = ("\\x02\\x01\\x0", "*\\x86H\\x86\\xf7\\r\\x01\\x0")
"""Substrings one of which a bytes repr holding a private key's DER has (:data:`_HEX_KEY` needs one):
the version field ``02 01 00``/``01``/``03`` (PKCS#8, PKCS#1, SEC 1, PKCS#12), which a repr always writes
as escapes, or an encrypted key's ``1.2.840.113549.1.5``/``.1.12`` algorithm identifier. The cheap test
before :data:`_BYTES_REPR` runs, wherever in a repr the key starts."""
_DOUBLED_BYTES_REPR: Final = re.compile(
    r"(?<![A-Za-z0-9_])b(\\?[\"'])((?:(?!\1)(?:[^\\\n]|\\{4}|\\{3}[\"']|\\{2}[^\\\n]|\\[\"']))*)(\1?)"
)
"""A :data:`_BYTES_REPR` in a JSON string or another repr, its backslashes doubled
(``b'0.\\\\x02\\\\x01...'``; ``b\\"...\\"`` or ``b\\'...\\'`` where its quotes were escaped too): the access
log's JSON form of a field holding a repr, a JSON log line's message, ``repr(repr(key))``. Its escapes
are two backslashes (four for a backslash byte, three before a quote), up to its opening quote again
or, cut off, the end of the line; :func:`_mask_doubled_bytes_repr` takes one level off and judges it
as :func:`_mask_bytes_repr` does. Until session s47 (round 9) such a repr went through whole."""
_DOUBLED_BYTES_REPR_HINTS: Final = tuple(hint.replace("\\", "\\\\") for hint in _BYTES_REPR_HINTS)
""":data:`_BYTES_REPR_HINTS` with their backslashes doubled: the cheap test before
:data:`_DOUBLED_BYTES_REPR`."""
_ONE_ESCAPE: Final = re.compile(r"\\(.)")
"""One level of a JSON string's or repr's escaping: a backslash and the character it escapes."""
_CUT_ESCAPE: Final = re.compile(r"\\(?:x[0-9a-fA-F]?)?\Z")
"""An escape cut off at the end of a repr's body (a log line cut inside the repr)."""


def _holds_key(hex_digits: str) -> bool:
    """Whether bytes in lower-case hex hold a private key's DER (:data:`_HEX_KEY`) at a byte boundary."""
    position = 0
    while (found := _HEX_KEY.search(hex_digits, position)) is not None:
        if found.start() % 2 == 0:
            return True
        position = found.start() + 1
    return False


def _mask_bytes_repr(found: re.Match[str]) -> str:
    """A :data:`_BYTES_REPR` that holds a private key's DER anywhere in its bytes (:data:`_HEX_KEY`:
    PKCS#8, PKCS#1, SEC 1, encrypted PKCS#8, PKCS#12) masked whole, ``b`` and quotes kept; any other as
    it is.

    ``{'PrivateKey': b'0\\x82...'}``: a library's DEBUG line or an error quoting a key loaded as DER
    bytes. The hex rule reads hex digits, the PEM and base64 rules their alphabets; a repr's escapes are
    none of them, and until session s46 the key went through whole. Until session s47 only a repr
    starting with the key's ``0`` was looked at, and a key after other bytes (a length prefix,
    ``b'KEY:0\\x82...'``, a framed message) went through."""
    body, end = (found.group(1), found.group(2)) if found.group(1) is not None else found.group(3, 4)
    if not any(hint in body for hint in _BYTES_REPR_HINTS):
        return found.group(0)
    quote, kept = found.group(0)[1], found.end()
    if not end:  # cut: it ends where a string holding it ends, if one does
        kept = _string_end(found.string, found.start(), found.start() + 2, kept, "", quote)
        body = found.string[found.start() + 2 : kept]
    try:
        cut = body if end else _CUT_ESCAPE.sub("", body)  # closed: its last \\ is an escaped backslash's
        raw = codecs.escape_decode(cut.encode("latin-1", "backslashreplace"))[0]
    except ValueError:  # not a repr's escapes after all: a key's version field is there, so masked
        raw = None
    if raw is not None and not _holds_key(raw.hex()):
        return found.group(0)
    return f"b{quote}{MASK}{end}{found.string[kept : found.end()]}"


def _mask_doubled_bytes_repr(found: re.Match[str]) -> str:
    """A :data:`_DOUBLED_BYTES_REPR` judged by :func:`_mask_bytes_repr` with one level of escaping taken
    off its body (``\\\\x02`` read as ``\\x02``), masked whole when it holds a key (``b'[REDACTED]'``,
    ``b\\"[REDACTED]\\"``), its quotes kept as they were."""
    opening, body, end = found.groups()
    kept = found.end()
    if not end:  # cut: it ends where a string holding it ends, if one does
        kept = _string_end(found.string, found.start(), found.start(2), kept, opening[:-1], opening[-1])
        body = found.string[found.start(2) : kept]
    inner = _BYTES_REPR.match("b" + opening[-1] + _ONE_ESCAPE.sub(r"\1", body) + end[-1:])
    if inner is None or _mask_bytes_repr(inner) == inner.group(0):
        return found.group(0)
    return f"b{opening}{MASK}{end}{found.string[kept : found.end()]}"


def _form_secrets(lowered: str) -> bool:
    """Whether a lower-cased text may hold a :data:`_FORM_FIELD`: the cheap test before it runs."""
    return bool(_FORM_HINT.search(lowered) or ("%" in lowered and _ENCODED_FORM_HINT.search(lowered)))


_PATH_TOKEN: Final = re.compile(r"(?=[A-Za-z0-9+=]*[0-9])(?=[A-Za-z0-9+=]*[A-Za-z])[A-Za-z0-9+=]{24,}")
"""A run of 24 or more letters and digits (``+``, ``=``) mixing both, with no ``-``, ``_`` or ``.``
between: a key's random part (a Slack webhook's 24, a hex or base64 API key's 32 or more), not a
word, a model name (``Meta-Llama-3.1-70B-Instruct``), a UUID or an IdP's tenant or server ID
(``us-east-1_AbCdEfGhI``, Okta's 20-character ``aus...``)."""
_KEY_PREFIX: Final = re.compile(r"(?i)sk[-_](?=[A-Za-z0-9_-]*[0-9])[A-Za-z0-9_-]{16,}")
"""``sk-...``/``sk_...``: an OpenAI-, Anthropic- or Stripe-style secret key, whatever its length."""
_PATH_HINT: Final = re.compile(r"(?i)sk[-_]|[A-Za-z0-9+=]{24}")
"""What a URL's path needs for :func:`_secret_segment` to find a credential in it (besides a JWT,
which :data:`_TRIGGERS`' ``eyj`` finds): the cheap test :func:`needs_redaction` and :func:`redact`
run before splitting any URL."""


_REQUEST_TARGET: Final = re.compile(
    r"((?:^|(?<=[\s\"'(]))(?:GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS) |with url: )(/[^\s\"'<>]*)"
)
"""An HTTP request's target without scheme or host, where a library quotes it: the request line
(``"POST /v1/traces?api_key=... HTTP/1.1" 200``, urllib3's DEBUG line and aiohttp's access log) and
urllib3's ``Max retries exceeded with url: /v1/traces?api_key=...``, which the OTLP exporter logs as
a WARNING at every failed export. :func:`redact` masks it as :func:`redact_url` masks a URL's path,
query and fragment; before session s44 only URLs with a scheme were, and ``igw serve
--otel-endpoint 'https://collector/v1/traces?api_key=...'`` wrote the key at every export retry."""
_TARGET_HINT: Final = re.compile(r"(?:[A-Z] |url: )/")
"""What a text needs for :data:`_REQUEST_TARGET` to match: the cheap test before it runs."""


def _target_secrets(text: str) -> bool:
    """Whether ``text`` may hold a request target (:data:`_REQUEST_TARGET`) that :func:`redact` changes."""
    return bool(
        _TARGET_HINT.search(text)
        and (_URL_SECRET_MARKS.intersection(text) or _PATH_HINT.search(text) or "eyJ" in text)
    )


def _redact_target(found: re.Match[str]) -> str:
    """A request target masked as :func:`redact_url` masks a URL's path, query and fragment."""
    return found.group(1) + redact_url("x://h" + found.group(2))[len("x://h") :]


def _escaped_or_bytes_secrets(text: str) -> bool:
    """Whether ``text`` may hold an :data:`_ESCAPED_FIELD` or a key's :data:`_BYTES_REPR` (its backslashes
    doubled too, :data:`_DOUBLED_BYTES_REPR`): all need a
    backslash (a DER key's repr writes its version field as escapes), the one test most lines fail."""
    return "\\" in text and bool(
        _ESCAPED_HINT.search(text.lower())
        or _BYTES_REPR_HINTS[0] in text
        or _BYTES_REPR_HINTS[1] in text
        or _DOUBLED_BYTES_REPR_HINTS[0] in text
        or _DOUBLED_BYTES_REPR_HINTS[1] in text
    )


def needs_redaction(text: str) -> bool:
    """Whether :func:`redact` may change ``text``; ``False`` guarantees ``redact(text) == text``
    (none of the patterns can match: no user-info URL is possible and no trigger substring occurs).

    The access log uses it on a line's strings, once per distinct string, so that a line built only
    of such strings is written without the writer thread scanning it again
    (:mod:`igw.gateway.access_log`)."""
    if (plain := _plain(text)) != text and needs_redaction(plain):
        return True  # and the text as written, below (:func:`_unconfused` reads both)
    if "://" in text and (_URL_SECRET_MARKS.intersection(text) or _PATH_HINT.search(text)):
        return True
    if _target_secrets(text) or _lone_secret(text) or _escaped_or_bytes_secrets(text) or _dsn_secrets(text):
        return True
    if "%" in text and _ENCODED_URL_MARK.search(text) and _ENCODED_URL.search(text):
        return True
    if _mask_library_values(text) != text:
        return True
    lowered = text.lower()
    return (
        _form_secrets(lowered)
        or (
            _FIELD_HINT.search(lowered) is not None
            and (
                _QUOTED_HINT.search(lowered) is not None
                or _keyword_secrets(lowered)
                or (_config_secrets(lowered) and _config_changes(text))
            )
        )
        or _hex_secrets(lowered)
        or any(trigger in lowered for trigger in _TRIGGERS)
    )


_URL_SECRET_MARKS: Final = frozenset("@?#")
"""Characters one of which a URL needs for :func:`redact_url` to change its user-info, query or
fragment (its path: :data:`_PATH_HINT`)."""


def redact_url(url: str) -> str:
    """``url`` with its user-info, the value of each query parameter and each ``name=value`` of its
    fragment replaced by :data:`MASK`; scheme, host, port, path, parameter names and a fragment's
    anchor kept, so the message still says which endpoint and which parameters.

    A JWKS, OIDC, OTLP, backend or Redis URL may carry a credential in any of these places
    (``rediss://user:password@host``, ``?api_key=``, ``?sig=`` of a SAS URL, ``X-Amz-Signature`` of a
    presigned one, ``#access_token=``), and no list of parameter names covers them all, so every value
    is masked. A path segment that holds a credential (:func:`_secret_segment`: an API key in the
    path, ``/key/sk-...``, a webhook's secret, a JWT) is masked whole; before session s44 the path
    was shown as it was, so ``https://hooks.example/services/T0/B0/<secret>`` went to the logs.
    :func:`redact` applies this to every URL in a text, which is how log lines, errors,
    Events and reports quote a configured URL; call it directly to quote one URL (a metric label)."""
    parts = _URL_PARTS.fullmatch(url)
    if parts is None:  # unreachable for a string holding "://"; masked whole rather than shown
        return MASK
    scheme, userinfo, rest, query, fragment = parts.groups()
    host, slash, path = rest.partition("/")
    if slash and (_PATH_HINT.search(path) or "eyJ" in path):
        path = "/".join(_mask_segment(segment) for segment in path.split("/"))
    shown = scheme + (f"{MASK}@" if userinfo is not None else "") + host + slash + path
    if query is not None:
        shown += "?" + "&".join(_mask_parameter(item) for item in query.split("&"))
    if fragment is not None:
        shown += "#" + "&".join(_mask_parameter(item, bare=False) for item in fragment.split("&"))
    return shown


_AFTER_URL: Final = re.compile(r"[:.,;)\]]+$")
"""Punctuation a text puts right after a URL (``... /x: 404``), which the URL pattern takes in."""


def _mask_segment(segment: str) -> str:
    """A path segment masked whole when it holds a credential, punctuation after it kept."""
    if not _secret_segment(segment):
        return segment
    after = _AFTER_URL.search(segment)
    return MASK + (after.group(0) if after else "")


def _secret_segment(segment: str) -> bool:
    """Whether a URL path segment holds a credential: a JWT, an ``sk-`` key (:data:`_KEY_PREFIX`)
    or a long run of letters and digits (:data:`_PATH_TOKEN`). Ordinary segments (``v1``,
    ``chat``, ``completions``, ``.well-known``, ``jwks.json``, model names, UUIDs) are none."""
    return bool(_PATH_TOKEN.search(segment) or _KEY_PREFIX.match(segment) or _JWT.search(segment))


def _mask_parameter(item: str, *, bare: bool = True) -> str:
    """One ``name=value`` item of a query or fragment with its value masked; an empty one
    (``a=1&&b=2``) stays empty. An item without ``=`` is all value in a query (``?s3cr3t``), masked
    when ``bare``; in a fragment it is an anchor (``schema#``, ``security.md#jwt``), kept, unless it
    holds a credential as a path segment may (:func:`_secret_segment`: ``#<token>``, ``#eyJ...``,
    ``#sk-...``), which went through until session s47 (round 10)."""
    if not item:
        return item
    name, equals, _ = item.partition("=")
    if equals:
        return f"{name}={MASK}"
    return MASK if bare else _mask_segment(item)


def redact(text: str) -> str:
    """``text`` with every credential-looking substring replaced by :data:`MASK`: credential headers,
    bearer tokens, JWTs, URL secrets, and private keys (PEM blocks, their base64, a value assigned to
    a key's name), which botocore's DEBUG line for ACM's ``ImportCertificate`` printed whole, and a
    key without a name on a line of its own (:data:`_LONE_LINE`), also where a separator or a name is
    written in a lookalike (:func:`_unconfused`)."""
    return _unconfused(text, _redact)


_LOOKALIKES: Final[dict[int, str]] = str.maketrans(
    {
        **{code: chr(code - 0xFEE0) for code in range(0xFF01, 0xFF5F)},
        0x3000: " ",
        0xFE55: ":",
        0xFE13: ":",
        0x2236: ":",
        0xA789: ":",
        0x02F8: ":",
        0x0589: ":",
        0x05C3: ":",
        0xFE66: "=",
        0x207C: "=",
        0x208C: "=",
        0xA78A: "=",
    }
)
"""Characters that read as ASCII punctuation or letters, each to its ASCII one: the fullwidth forms
(``＝``, ``：``, ``＆``, ``＂``, ``ｐａｓｓｗｏｒｄ``), the ideographic space, small and vertical colons, the
ratio sign ``∶``, the modifier letters ``꞉``/``꞊``, super- and subscript ``=``. One character for one,
so a text keeps its length."""


def _unconfused(text: str, rules: Callable[[str], str]) -> str:
    """``rules(text)``, read with :data:`_LOOKALIKES` as their ASCII forms: where that masks something,
    the masked text has the ASCII forms (``password=[REDACTED]`` for ``password＝hunter2``), where it
    masks nothing, ``text`` is returned as it was. Until round 23 (session s50) a fullwidth ``＝``/``：``
    or a fullwidth name after which a person pasted a secret hid it from every rule; an ASCII text
    (almost every log line) costs one :meth:`str.isascii`.

    The rules read the text as written first, then its ASCII form: a lookalike may also be what let a
    rule see a secret (a fullwidth letter glued before ``Cookie:``, ``Authorization:`` or ``Bearer``,
    which those rules mask after any character but an ASCII letter, a camel-case word's). Until session
    s50 (review 52) only the ASCII form was read, and such a value, masked before round 23, was shown."""
    masked = rules(text)
    if (plain := _plain(masked)) == masked:
        return masked
    again = rules(plain)
    return masked if again == plain else again


_ESCAPED_LOOKALIKE: Final = re.compile(
    r"\\u(ff(?!0[27]|3c)[0-5][0-9a-f]|3000|fe66|207c|208c|a78a|fe55|fe13|2236|a789|02f8|0589|05c3)",
    re.IGNORECASE,
)
"""A lookalike of :data:`_LOOKALIKES` as a JSON or repr escape (``\\uff1d``, ``\\uff50``: Python's
``json.dumps`` writes non-ASCII so by default), but for the fullwidth quotes and backslash, whose ASCII
forms would end or escape the string."""


def _plain(text: str) -> str:
    """``text`` with its lookalikes, raw or (in an ASCII text) escaped, as their ASCII forms; ``text``
    itself when it has none."""
    if not text.isascii():
        return text.translate(_LOOKALIKES)
    if "\\u" not in text:
        return text
    return _ESCAPED_LOOKALIKE.sub(lambda found: chr(int(found.group(1), 16)).translate(_LOOKALIKES), text)


def _redact(text: str) -> str:
    """:func:`redact`'s rules, on a text without lookalikes."""
    if not text:
        return text
    text = _mask_library_values(text)
    if "://" in text and (_URL_SECRET_MARKS.intersection(text) or _PATH_HINT.search(text) or "eyJ" in text):
        text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    if "%" in text and _ENCODED_URL_MARK.search(text):
        text = _ENCODED_URL.sub(lambda m: f"{m.group(1)}{MASK}{m.group(3)}", text)
    if _dsn_secrets(text):
        text = _DSN.sub(lambda m: f"{m.group(1)}:{MASK}@", text)
    if _target_secrets(text):
        text = _REQUEST_TARGET.sub(_redact_target, text)
    lowered = text.lower()
    if _form_secrets(lowered):
        text = _FORM_FIELD.sub(_mask_form_field, text)
    fields = _FIELD_HINT.search(lowered) is not None  # none of the next three hints otherwise
    quoted = fields and _QUOTED_HINT.search(lowered) is not None
    if quoted:
        text = _QUOTED_FIELD.sub(_mask_quoted_field, text)
    keyword = fields and _keyword_secrets(lowered)
    if keyword:
        text = _KWARG_FIELD.sub(_mask_kwarg, text)
        if "\\" in text:
            text = _ESCAPED_KWARG.sub(_mask_escaped_kwarg, text)
    if "\\" in text:
        if _ESCAPED_HINT.search(lowered):
            quoted = True
            text = _ESCAPED_FIELD.sub(_mask_quoted_field, text)
        if _BYTES_REPR_HINTS[0] in text or _BYTES_REPR_HINTS[1] in text:
            text = _BYTES_REPR.sub(_mask_bytes_repr, text)
        if _DOUBLED_BYTES_REPR_HINTS[0] in text or _DOUBLED_BYTES_REPR_HINTS[1] in text:
            text = _DOUBLED_BYTES_REPR.sub(_mask_doubled_bytes_repr, text)
    if (quoted or keyword) and _secret_containers(text):
        text = _mask_containers(text)
    if quoted and _left_open(text):
        text = _CUT_FIELD.sub(_mask_cut_field, text)
    if fields and _config_secrets(lowered):
        text = _CONFIG_LINE.sub(_mask_config_line, text)
    if _hex_secrets(lowered):
        text = _mask_hex_keys(text)
    if not any(trigger in lowered for trigger in _TRIGGERS):
        return _LONE_LINE.sub(_mask_lone, text) if _lone_secret(text) else text
    text = _PEM_BLOCK.sub(MASK, text)
    text = _KEY_DUMP.sub(_mask_dump, text)
    text = _ENCODED_PEM.sub(MASK, text)
    text = _ENCODED_KEY.sub(MASK, text)
    text = _LOCAL_KEY_ID.sub(lambda m: f"{m.group(1)}{MASK}", text)
    text = _KEY_ASSIGNMENT.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    text = _CREDENTIAL_HEADER.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    text = _AWS_KEY_PAIR.sub(lambda m: f"{m.group(1)}{MASK}", text)
    text = _BEARER.sub(_mask_bearer, text)
    text = _JWT.sub(MASK, text)
    return _LONE_LINE.sub(_mask_lone, text) if _lone_secret(text) else text


def _mask_lone(found: re.Match[str]) -> str:
    """A :data:`_LONE_LINE` with its run masked, the blanks around it kept."""
    line = found.group(0)
    return line.replace(found.group(1), MASK)


def redact_quoting_keys(text: str) -> str:
    """:func:`redact`, and every run of 48 or more base64 or hex characters masked too, whatever it
    starts with: for a text that may quote a private key, where a long run is key material more
    likely than anything else.

    The operator's messages about a certificate's Secret (an ACM refusal, a Secret that does not
    parse) go into the object's status and Events, readable by whoever may read the object, not only
    by who may read the Secret; an AWS validation error can quote the request's value. :func:`redact`
    recognises a key by its shape (a PEM block, the base64 of ``-----BEGIN``, a DER ``SEQUENCE``), which
    misses the base64 of a PEM with text before its BEGIN line (``Bag Attributes``, as ``openssl
    pkcs12`` writes), a key in hex or a cut piece of a PEM body; no word, ARN or uid of such a
    message is 48 characters of letters and digits. Not for every log line: a digest or a long
    identifier there is no key."""
    return _BASE64_RUN.sub(MASK, redact(text))


_ASSIGNED_NAME: Final = (
    r"(?i)(?<![a-z0-9_.\[\]-])((?=[a-z0-9_.\[\]-]*?"
    r"(?:password|passwd|secret|token(?!i[sz])|api[_-]?key|access[_-]?key|credential))"
    r"[a-z0-9_.\[\]-]*+)"
)
"""A secret's name as :data:`_SECRET_ASSIGNMENT` and :data:`_FIELD_ERROR_VALUE` find it: a dotted path,
a Kubernetes index in brackets (``data[password]``, ``stringData[api_key]``) since round 21 (session
s50), where the bracket ended the name and the value quoted after it went through, and ``api-key``,
``access-key`` (a Secret's data key); not ``tokenizer``,
``tokenize``, ``tokenization`` (``spec.tokenizerPath: /models/...`` was masked until round 21).

The name is a whole run of those characters, tried once where the run starts: the secret's word is
looked for ahead of it, then the run taken without giving any back (a separator holds none of its
characters). Until session s50 (review 52) the name started at any word boundary in the run, each
start scanning the run to its end, and a long run (``a.a.a...``, ``api-keyapi-key...``: 10 KB took
seconds to minutes) held the log path on :func:`redact`'s field-error rule and
:func:`redact_value`."""
_FIELD_ERROR: Final = (
    r"(?-i:((?:Invalid|Unsupported|Duplicate) value|Not found): "
    r"(?:\"(?:[^\"\\\n]|\\.)*\"|\\\"(?:[^\"\\\n]|\\(?!\")[^\n])*\\\"|[^\n]*?(?=: )|[^\s,;&\"'}]+))"
)
"""A Kubernetes field error's type and the value it quotes (group 4 the type)."""
_SECRET_ASSIGNMENT: Final = re.compile(
    _ASSIGNED_NAME + r"([\"']?\s*[:=]\s*[\"']?)(" + _FIELD_ERROR + r"|[^\s,;&\"'}]+)"
)
"""``password=...``, ``aws_secret_access_key: ...``, ``?token=...``: a value assigned to a secret's name,
unless :func:`_names_no_secret` reads the match as an error's name or an AWS name and prose. A
Kubernetes field error that quotes the value (``spec.token: Invalid value: "..."``, group 4 its
type) is taken whole: :func:`_mask_assignment` keeps the type and masks the value after it; a value
neither quoted nor one token (``Invalid value: map[string]interface {}{...}: ...``) up to the ``: `` that
follows it, where until session s49 (round 20) it was masked only up to its first blank."""
_ERROR_NAME: Final = re.compile(r"[A-Z][A-Za-z0-9]*[a-z0-9](?:Exception|Error|Fault|Failure|Violation|Id)")
"""A CamelCase exception class or error code (``ExpiredTokenException``, ``InvalidClientTokenId``,
``NoCredentialsError``, ``PasswordPolicyViolation``), its module path (``jwt.exceptions.``) taken off
first: a name, not a field, whatever secret's word it holds."""
_ERROR_TEXT: Final = re.compile(r"\(?[A-Za-z]+(?:[_'-][A-Za-z]+)*\)?[.,:;!?]?(?=\s|\Z)")
"""The first word of an error's text after its name (``The``, ``Unable``, ``Couldn't``,
``(token_expired)``): letters only, so ``InvalidTokenError: abc123`` still has its value masked."""
_PROSE: Final = re.compile(
    r"([A-Z]?[a-z]+(?:'[a-z]{1,2})?)[.,:;!?]?((?:[ \t]+\(?[A-Za-z][A-Za-z_'-]*\)?[.,:;!?]?){1,4})"
)
"""A word and up to four more after it: the start of a sentence."""
_SENTENCE_WORDS: Final = (
    "a an the to of in on at by for from with into about as if than or and but not no is are was were be "
    "been being has have had do does did can cannot can't could couldn't will would should must may "
    "please your you this that these those it its them their there here which when who what we our"
)
_FUNCTION_WORDS: Final = frozenset(_SENTENCE_WORDS.split())
"""Words that make a run of words a sentence: a passphrase (``correct horse battery staple``) holds
none of them, the prose after an error's label (``credentials: check your profile``, ``Secret: not
found in ...``, ``GetSecretValue: Access denied for the role``) nearly always does."""
_ERROR_OPENERS: Final = (
    "access check unable exec environment token refresh missing must cannot required invalid unknown "
    "expected duplicates each only expired error failed denied found field input should set empty value "
    "see use needs given"
)
_PROSE_OPENERS: Final = _FUNCTION_WORDS | frozenset(_ERROR_OPENERS.split())
"""The words a sentence after a secret's name may start with to be kept as prose: the function words and
the words the project's own errors and the AWS SDK's start with after a secret-named path or label
(``passwordEnv: environment variable ... is not set``, ``credentials: check your profile``, ``Secret:
not found in ...``, ``GetSecretValue: Access denied for ...``, ``SSO Token: Token for x does not exist``,
a configuration problem's ``must``/``cannot``/``duplicates``). Since round 17 (session s49): any other
first word is the value, masked, the words after it kept (``client_secret: [REDACTED] and more``); a
one-word password followed by prose (``client_secret: Rosebud and more``) was shown whole."""
_MESSAGE_TEMPLATE: Final = re.compile(
    r"(?:HTTP[ \t][1-5][0-9]{2}"
    # the project's own schema messages (igw.config.schema_messages)
    r'|(?:unknown|missing required) field(?= ")|key must be'
    r"|expected \[?'?[a-z]+'?(?:, '?[a-z]+'?)*\]?, got [a-z]+"
    # pydantic_core's messages
    r"|Field (?:required|is frozen)|Extra inputs are not permitted|Input should (?:be|have|not)"
    r"|String should (?:have at (?:least|most) [0-9]+ characters?|match pattern|contain only ASCII)"
    r"|Value error,|Assertion failed,|Invalid JSON:|Missing required (?:argument|keyword only argument"
    r"|positional only argument)|Unexpected (?:keyword|positional) argument|URL (?:input|scheme) should"
    # Kubernetes field errors without a value (those with one: :data:`_SECRET_ASSIGNMENT`)
    r"|Required value|Forbidden:|Too long:|Too many:|Internal error"
    # botocore's parameter validation
    r"|Parameter validation failed|Invalid (?:type|length|range) for parameter"
    r")(?![A-Za-z0-9_])"
)
"""The messages the project builds from jsonschema's, pydantic's, Kubernetes' and botocore's errors
after a secret-named path and ``: ``, matched as whole fixed phrases (``spec.redis.passwordEnv:
expected string, got integer``, ``api_key: String should have at least 8 characters``,
``spec.tokenSecretRef: Required value``), and an HTTP status (``no token: HTTP 401``): kept, not
taken for a value. Until session s49 (round 19) their first word was masked (``[REDACTED] required
field``, ``[REDACTED] inputs are not permitted``) unless it was one of :data:`_PROSE_OPENERS` and a
function word followed. A phrase, not a word: a one-word secret that happens to open one (``password:
String and more``, ``token: Required``) stays masked, and so do a value of digits only (``api_key:
1234``, a PIN) and ``token=HTTP``. jsonschema's own messages start with the value itself (``'x' is
not of type 'string'``), which stays masked."""
_ARN_BEFORE: Final = re.compile(r"arn:aws(?:-[a-z]+)*:\Z")
_IAM_ACTION: Final = re.compile(r"(?:[A-Z][a-z]+)+\*?|\*")
_TOKEN_LIKE: Final = re.compile(
    r"(?<![A-Za-z0-9+/])(?=[A-Za-z0-9+/]*[0-9])(?=[A-Za-z0-9+/]*[A-Za-z])[A-Za-z0-9+/]{20,}={0,2}"
)
"""A run of 20 or more base64 characters mixing letters and digits: an API key's random part, a base64
secret, a JWT segment (cut or whole), unless it reads as a path (:func:`_mask_token`). Names are
hyphen-, dot- or underscore-separated words, each shorter (``mistral-7b-instruct-v0.3``, a UID), and are
left alone. ``=`` only as trailing padding, as base64 has it: until round 21 (session s50) a name and
its value glued by ``=`` were one run (``maxTokensPerMinute=5000`` read ``[REDACTED]``, name and all); a
value after ``=`` is a run of its own now."""
_MIXED: Final = re.compile(r"(?=[^/]*[0-9])(?=[^/]*[A-Za-z])[^/]{20,}")
"""A ``/``-separated piece of such a run that is a token by itself (20+ characters, letters and digits)."""


def redact_value(text: str, *, identifiers: bool = False) -> str:
    """:func:`redact`, and also every value assigned to a secret's name and every token-like run
    masked: for quoting a value a user supplied (a configuration value in an error message), where
    no header or scheme word tells a credential apart and a cut-off token must not leak either.

    ``identifiers``: leave the runs that read as CamelCase identifiers (:func:`reads_as_identifier`),
    for a text whose token-like runs are names the caller put there, an audit result's resource (a
    CloudFormation logical ID, an AWS type name). Never for a value a user typed: a password such as
    ``CorrectHorseBatteryStaple12345678`` reads as a logical ID (session s38 first relaxed every
    text this way, and such passwords, masked before, went through)."""
    return _unconfused(text, functools.partial(_redact_value, identifiers=identifiers))


def _redact_value(text: str, *, identifiers: bool) -> str:
    """:func:`redact_value`'s rules, on a text without lookalikes."""
    text = _SECRET_ASSIGNMENT.sub(_mask_assignment, _redact(text))
    return _TOKEN_LIKE.sub(_mask_token_keeping_identifiers if identifiers else _mask_token, text)


_LIBRARY_SECRET_NAME: Final = re.compile(
    r"(?i)password|passwd|passphrase|secret|token|credential|api[_-]?key|access[_-]?key|private[_-]?key"
)
_NAME_NOT_SECRET_END: Final = frozenset(["id", "ids", "name", "names", "arn", "arns", "type", "types"])
_BOTOCORE_VALUE: Final = re.compile(
    r"(Invalid (?:type|value|length) for (?:document )?parameter ([^\s,]+), value: )"
    r"([^\n]*(?=, type: <class '[^'\n]*'>|, valid min (?:value|length): )|[^\n]*)"
)
"""botocore's parameter validation error (``Invalid type for parameter SecretString, value: 12345, type:
<class 'int'>, valid types: <class 'str'>``): group 2 the parameter's name, group 3 the value, up to the
last ``, type: <class ...>``/``, valid min ...`` of its line, or to the line's end when the line was cut."""
_PYDANTIC_VALUE: Final = re.compile(
    r"(?m)(^([^\s\n][^\n]*)\n[ \t]+[^\n]*\[type=[A-Za-z0-9_]+, input_value=)"
    r"([^\n]*(?=, input_type=[^\n]*\]$)|[^\n]*)"
)
"""pydantic v2's ``str(ValidationError)``: a location line (group 2: ``api_key``, ``auth.0.token``), then
its message ending in ``[type=..., input_value=..., input_type=...]``; group 3 the input's repr, up to
the last ``, input_type=`` of its line, or to the line's end when the line was cut."""
_ESCAPED_LINE_CHAR: Final = r"(?:[^\n\\]|\\[^n\n])"
"""A character of a line whose line breaks are escaped (``\\n`` in a JSON string or a repr), an escape
taken whole (``\\\\`` is a backslash, so ``\\\\n`` is no line break)."""
_ESCAPED_PYDANTIC_VALUE: Final = re.compile(
    r"((?:^|(?<=\\n)|(?<=[\"']))((?:[^\s\\\"']"
    + _ESCAPED_LINE_CHAR
    + r"*?))\\n[ \t]+"
    + _ESCAPED_LINE_CHAR
    + r"*?\[type=[A-Za-z0-9_]+, input_value=)("
    + _ESCAPED_LINE_CHAR
    + r"*(?=, input_type=[^\]\n\\]*\](?:\\n|\Z|[\"']))|"
    + _ESCAPED_LINE_CHAR
    + r"*)"
)
""":data:`_PYDANTIC_VALUE` with its line breaks escaped: the error's text in a JSON log line (the access
log's ``error``, a JSON message) or a repr, which round 20's rule, on real lines only, did not find."""
_FIELD_ERROR_VALUE: Final = re.compile(_ASSIGNED_NAME + r"(: )" + _FIELD_ERROR)
"""A Kubernetes field error quoting the value of a secret-named field (``spec.token: Invalid value:
"..."``, ``data[password]: Invalid value: "..."``): :data:`_SECRET_ASSIGNMENT`'s field-error form
alone, which :func:`redact` masks (group 3 the type)."""


def _mask_library_values(text: str) -> str:
    """``text`` with the values that a library's validation error quotes after a secret's name masked:
    botocore's (:data:`_BOTOCORE_VALUE`), pydantic's (:data:`_PYDANTIC_VALUE`, its lines real or
    escaped) and Kubernetes' field errors (:data:`_FIELD_ERROR_VALUE`). Part of :func:`redact`, so every
    path masks them alike: until round 21 (session s50) only :func:`redact_value` did, and a log line,
    the access log's ``error`` and a logged traceback showed ``Invalid length for parameter
    SecretString, value: hunter2``, pydantic's ``input_value='...'`` and ``spec.token: Invalid value:
    "..."``. Each rule runs only where its literal is in the text."""
    if "for parameter " in text:
        text = _BOTOCORE_VALUE.sub(_mask_library_value, text)
    if "input_value=" in text:
        text = _PYDANTIC_VALUE.sub(_mask_library_value, text)
        if "\\n" in text:
            text = _ESCAPED_PYDANTIC_VALUE.sub(_mask_library_value, text)
    if " value: " in text or "Not found: " in text:
        text = _FIELD_ERROR_VALUE.sub(_mask_field_error, text)
    return text


def _mask_field_error(found: re.Match[str]) -> str:
    """A :data:`_FIELD_ERROR_VALUE` with its value masked, its type kept; as it is when the name counts
    tokens (:func:`names_a_count`: ``spec.maxTokens: Invalid value: -1``)."""
    if names_a_count(found.group(1)):
        return found.group(0)
    return f"{found.group(1)}: {found.group(3)}: {MASK}"


def _names_a_library_secret(name: str) -> bool:
    """Whether a botocore parameter's or pydantic location's name (``SecretString``, ``SecretBinary``,
    ``Password``, ``SessionToken``, ``PrivateKey``, ``auth.api_key``) holds a secret: its last segment
    holds a secret's word, and neither counts tokens (:func:`names_a_count`) nor names the secret by an
    id, name, ARN or type (``SecretId``, ``SecretArn``, ``TokenType``: shown, to say what to fix)."""
    last = re.split(r"[.\[\]]+", name.strip(".[]"))[-1]
    if not _LIBRARY_SECRET_NAME.search(last) or names_a_count(last):
        return False
    words = _NAME_WORD.findall(last)
    return not words or words[-1].lower() not in _NAME_NOT_SECRET_END


def _mask_library_value(found: re.Match[str]) -> str:
    """A :data:`_BOTOCORE_VALUE` or :data:`_PYDANTIC_VALUE` with its value masked when the parameter or
    location names a secret. Until session s49 (round 20) :func:`redact_value` showed it: ``value`` and
    ``input_value`` are no secret's names, and the secret-named parameter stood before them."""
    if not _names_a_library_secret(found.group(2)):
        return found.group(0)
    return f"{found.group(1)}{MASK}"


def _mask_assignment(found: re.Match[str]) -> str:
    """A :data:`_SECRET_ASSIGNMENT` with its value masked, unless its name counts tokens
    (:func:`names_a_count`: ``max_tokens``, ``tokensPerMinute``) or :func:`_names_no_secret`. A
    Kubernetes field error's type is kept and the value it quotes masked (``spec.token: Invalid value:
    [REDACTED]: ...``): until session s49 (round 19) the type's first word was masked and the value
    shown."""
    if names_a_count(found.group(1)):
        return found.group(0)
    if found.group(4) is not None and found.group(2) == ": ":
        return f"{found.group(1)}: {found.group(4)}: {MASK}"
    if _names_no_secret(found):
        return found.group(0)
    return f"{found.group(1)}{found.group(2)}{MASK}"


def _names_no_secret(found: re.Match[str]) -> bool:
    """Whether a :data:`_SECRET_ASSIGNMENT` is an error's name or an AWS name and what follows it, not a
    secret's name and its value; until session s48 (round 14) the word after them was masked:
    ``ExpiredTokenException: [REDACTED] security token included in the request is expired``,
    ``NoCredentialsError: [REDACTED] to locate credentials``, ``credentials: [REDACTED] your profile``,
    ``secretsmanager:[REDACTED]`` for ``secretsmanager:GetSecretValue`` in an AccessDenied message.

    Kept: after ``secretsmanager:`` an IAM action or an ARN's region and resource (its secret's name,
    which CloudTrail shows); after an error's name (:data:`_ERROR_NAME`) and ``: `` a word
    (:data:`_ERROR_TEXT`); after any other secret's name and ``: `` (no quote, no ``=``) a sentence
    (:data:`_PROSE` holding one of :data:`_FUNCTION_WORDS`) whose first word is one of
    :data:`_PROSE_OPENERS`; a library's or the project's message (:data:`_MESSAGE_TEMPLATE`). A value
    with a digit or a symbol (``Secret: s3cr3t-v4lue``), a lone word (``secret: Sunshine``), words
    without a function word (``password: correct horse battery staple``), a quoted value and
    ``name=value`` stay masked."""
    name, separator, value = found.group(1, 2, 3)
    text = found.string
    if name.lower() == "secretsmanager" and separator == ":":
        before = text[max(0, found.start() - 16) : found.start()]
        return _ARN_BEFORE.search(before) is not None or _IAM_ACTION.fullmatch(value) is not None
    if _NAMING_VALUE.fullmatch(value):
        return True
    if _DURATION.fullmatch(value) and _names_a_duration(name):
        return True
    if separator[0] != ":" or separator[-1] not in " \t":
        return False
    if _MESSAGE_TEMPLATE.match(text, found.start(3)):
        return True
    if _ERROR_NAME.fullmatch(name.rpartition(".")[2]):
        return _ERROR_TEXT.match(text, found.start(3)) is not None
    prose = _PROSE.match(text, found.start(3))
    if prose is None or prose.group(1).lower() not in _PROSE_OPENERS:
        return False
    words = [prose.group(1), *re.findall(r"[A-Za-z][A-Za-z_'-]*", prose.group(2))]
    return any(word.lower() in _FUNCTION_WORDS for word in words)


_NAMING_VALUE: Final = re.compile(
    r"arn:aws[a-z-]*:[a-z0-9-]+:[a-z0-9-]*:(?:[0-9]{12})?:[^\s]+|https?://[^\s@?#\[\]]+"
)
"""A value that names a secret or where to get one, not the secret: an ARN (``secretsManagerArn:
arn:aws:secretsmanager:...``) and a URL without user-info, query or fragment (``tokenEndpoint:
https://idp/token``). :func:`redact_value` keeps it after a secret's name since round 23 (session s50),
where it masked it whole; a token-like run in it is still masked (:data:`_TOKEN_LIKE`), and a URL's
user-info or query, already masked by :func:`redact`, leaves it no match."""
_DURATION: Final = re.compile(r"[0-9]+(?:\.[0-9]+)?(?:ms|s|m|h|d)?")
_DURATION_UNIT_TEXT: Final = (
    "seconds second secs sec minutes minute mins hours hour days day ms millis milliseconds"
)
_DURATION_UNITS: Final = frozenset(_DURATION_UNIT_TEXT.split())
_DURATION_SUBJECT_TEXT: Final = (
    "lifetime ttl expiry expires expiration age timeout validity duration interval"
)
_DURATION_SUBJECTS: Final = frozenset(_DURATION_SUBJECT_TEXT.split())


def _names_a_duration(name: str) -> bool:
    """Whether a secret's name says its value is how long something lasts: its last word ``ttl``, or a
    unit of :data:`_DURATION_UNITS` with a word of :data:`_DURATION_SUBJECTS` before it
    (``accessTokenLifetimeSeconds``, ``tokenTtl``, ``sessionTokenMaxAgeMinutes``). A number after such a
    name is kept by :func:`redact_value` since round 23 (session s50), where ``access`` made it a
    credential's name (:func:`names_a_count`) and the number was masked. A rate stays masked after a
    credential's name (``hfTokenPerMinute``), as does a number after any other (``api_key: 1234``)."""
    words = [word.lower() for word in _NAME_WORD.findall(name.rpartition(".")[2])]
    if not words:
        return False
    return words[-1] == "ttl" or (words[-1] in _DURATION_UNITS and not _DURATION_SUBJECTS.isdisjoint(words))


_CDK_LOGICAL_ID: Final = re.compile(r"[A-Z][A-Za-z0-9]*[0-9A-F]{8}")
"""A CloudFormation logical ID as CDK writes it: the construct path's words and an 8-digit hash."""
_CAPITALISED_WORD: Final = re.compile(r"[A-Z][a-z]{2,}")
_LOWER_AFTER_DIGIT_OR_START: Final = re.compile(r"(?:^|[0-9])[a-z]")
_DIGIT_AFTER_LOWER_OR_START: Final = re.compile(r"(?:^|[a-z])[0-9]")
_LOWER_RUN: Final = re.compile(r"[a-z]+")
_VOWEL: Final = re.compile(r"[aeiouy]")


def reads_as_identifier(run: str) -> bool:
    """Whether a letters-and-digits run is a CamelCase name, not a credential: a CDK logical ID
    (``EksClusterRoleD18DF32F``: two capitalised words or more, then the 8-digit hash) or a type or
    policy name (``ElasticLoadBalancingV2``, ``AmazonEC2ContainerRegistryReadOnly``: three words or
    more making up 70 % of it, every run of small letters holding a vowel, at most two digits, each
    after a capital, never before a small letter).

    ``igw audit --cdk-out`` named every role ``IAM role [REDACTED]`` and every load balancer
    ``AWS::[REDACTED]::LoadBalancer``. Random keys almost never fit: their digits sit next to small
    letters, and capitalised words of three letters or more are rare in them.
    """
    if not run.isascii() or not run.isalnum():
        return False
    words = _CAPITALISED_WORD.findall(run)
    if _CDK_LOGICAL_ID.fullmatch(run) and len(_CAPITALISED_WORD.findall(run[:-8])) >= 2:
        return True
    return (
        len(words) >= 3
        and all(_VOWEL.search(lower) for lower in _LOWER_RUN.findall(run))
        and sum(map(len, words)) >= 0.7 * len(run)
        and sum(c.isdigit() for c in run) <= 2
        and _LOWER_AFTER_DIGIT_OR_START.search(run) is None
        and _DIGIT_AFTER_LOWER_OR_START.search(run) is None
    )


def _mask_token(found: re.Match[str]) -> str:
    """A token-like run masked, or left as it is when it reads as a path: short words between slashes
    (``/home/user1/projects/config``, an ACM certificate's ``certificate/1234abcd``), no ``+`` or ``=``.
    Base64 puts ``/`` among its letters, but a secret of 20+ characters whose every slash-separated
    piece is short and which has neither ``+`` nor padding is rare; a path in a message is common (a
    file that cannot be read, a resource's ARN in an audit finding) and masking it hid what to fix."""
    run = found.group(0)
    if "/" not in run or "+" in run or "=" in run:
        return MASK
    return MASK if any(_MIXED.fullmatch(piece) for piece in run.split("/")) else run


def _mask_token_keeping_identifiers(found: re.Match[str]) -> str:
    """:func:`_mask_token`, leaving a run (or each ``/``-separated piece) that reads as an identifier."""
    run = found.group(0)
    if "+" in run or "=" in run:
        return MASK
    if "/" not in run:
        return run if reads_as_identifier(run) else MASK
    pieces = run.split("/")
    return MASK if any(_MIXED.fullmatch(p) and not reads_as_identifier(p) for p in pieces) else run


def _mask_bearer(found: re.Match[str]) -> str:
    """``Bearer <token>`` with the token masked; prose such as ``bearer token refused`` unchanged.

    A value is a token unless it reads as a word: letters only, at most capitalised, shorter than
    :data:`WORD_MAX_CHARS`, or shorter than :data:`TOKEN_MIN_CHARS` whatever its characters. Real
    tokens (JWTs, API keys, base64 credentials) are long and mix digits, case or punctuation. Nor is
    an ``auth-param`` (:data:`_AUTH_PARAM`): before session s46 ``WWW-Authenticate: Bearer
    realm=igw-gateway, error=invalid_token`` was logged as ``Bearer [REDACTED], error=...``, the
    challenge's realm hidden as if it were a token. Words joined by ``-`` or ``_``
    (``Bearer authorization_required_by_policy``) are taken for a token: a static token a person chose
    (``team-alpha-shared-key``) has that shape, and showing prose is not worth showing it.
    """
    glued, scheme, value = found.group(1, 2, 3)
    word = value.isalpha() and value[1:].islower() and len(value) < WORD_MAX_CHARS
    if word or len(value) < TOKEN_MIN_CHARS or _AUTH_PARAM.match(value):
        return found.group(0)
    if glued is not None and _TOKEN_CHARACTERS.search(value) is None:
        return found.group(0)
    return f"{scheme} {MASK}"
