"""The redacting log formatter masks every credential shape, on every logger and in tracebacks."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict

from igw import redaction
from igw.addon.configuration import problems as addon_problems
from igw.cli.main import main
from igw.gateway.redaction import RedactingFormatter
from igw.gateway.upstream import upstream_headers
from igw.operator import admission
from igw.redaction import MASK, redact
from tests.config.cases import base_document
from tests.operator.harness import igwc

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLWJ5dGVz"


@pytest.mark.parametrize(
    "text",
    [
        f"Authorization: Bearer {JWT}",
        "authorization: Basic dXNlcjpwYXNz",
        "Proxy-Authorization: secret-value",
        "Cookie: session=abcdef; other=1",
        "x-api-key: sk-live-123456",
        "{'api-key': 'sk-live-123456'}",
        f"bad header value {JWT}\x01 in request",
        f"token={JWT}",
        "redis connection to rediss://default:s3cr3t-pw@cache.example:6379/0 failed",
        "OTLP export to https://collector:s3cr3t-pw@otel.example:4318/v1/traces refused",
        "url='redis://:s3cr3t-pw@10.0.0.5:6379'",
    ],
)
def test_credentials_are_masked(text: str) -> None:
    out = redact(text)
    assert MASK in out
    for secret in (JWT, "dXNlcjpwYXNz", "secret-value", "abcdef", "sk-live-123456", "s3cr3t-pw"):
        assert secret not in out


@pytest.mark.parametrize(
    "text",
    [
        "endpoint 10.0.0.1:8000 (llama) excluded: scrape failed: TimeoutError",
        "bearer token refused",
        "Bearer Authentication failed for tenant a",
        "basic auth disabled; bearer tokens required",
        'WWW-Authenticate: Bearer error="invalid_token"',
        "tenant alice@example.com sent to http://10.0.0.1:8000/v1/completions",
        "scrape of http://10.0.0.1:8000/metrics failed; owner ops@example.com",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("refused bearer wrong-token-0123456789 for a", "wrong-token-0123456789"),
        ("Basic dXNlcjpwYXNz sent", "dXNlcjpwYXNz"),
        ("bearer abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnopqrstuvwxyz"),  # too long for a word
        ("bearer Sk1234567", "Sk1234567"),
    ],
)
def test_token_looking_values_after_a_scheme_are_masked(text: str, secret: str) -> None:
    assert secret not in redact(text)


def test_formatter_masks_messages_arguments_and_tracebacks() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(RedactingFormatter("%(levelname)s %(message)s"))
    log = logging.getLogger("tests.redaction")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("header was %s", f"Bearer {JWT}")
        try:
            raise ValueError(f"cannot parse {JWT}")
        except ValueError:
            log.exception("failed")
    finally:
        log.removeHandler(handler)
    printed = stream.getvalue()
    assert JWT not in printed
    assert "Traceback" in printed  # the traceback itself is kept, only the secret is masked
    assert printed.count(MASK) >= 2


def test_hop_by_hop_headers_and_those_named_in_connection_are_dropped() -> None:
    client = CIMultiDict(
        {
            "Connection": "close, X-Private",
            "X-Private": "1",
            "Keep-Alive": "5",
            "TE": "trailers",
            "X-Kept": "2",
        }
    )
    out = upstream_headers(client, strip=frozenset(), add={"X-Request-Id": "r"})
    assert dict(out) == {"X-Kept": "2", "X-Request-Id": "r"}


@pytest.mark.parametrize(
    "text",
    [
        "APIKEY=sk-1",
        "X-Auth-Token: t0k3n",
        "SET-COOKIE: a=b",
        "BASIC dXNlcjpwYXNz",
        "x bearer abc",
        f"jwt {JWT.upper()} {JWT}",
        '{"error": "Proxy-Authorization=\'p\'"}',
        "plain access line with no credential at all",
    ],
)
def test_the_trigger_prescan_never_skips_a_line_the_patterns_would_change(text: str) -> None:
    """``redact`` skips the patterns when no trigger word occurs; its answer must be the patterns'."""
    slow = redaction._CREDENTIAL_HEADER.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    slow = redaction._BEARER.sub(redaction._mask_bearer, slow)
    slow = redaction._JWT.sub(MASK, slow)
    assert redact(text) == slow


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("password=hunter2", "hunter2"),
        ('{"aws_secret_access_key": "wJalrXUtnFEMI/K7MDENG"}', "wJalrXUtnFEMI"),
        ("https://host/v1?api_key=abc123&x=1", "abc123"),
        ("ghp_Z9x8Y7w6V5u4T3s2R1q0P9o8N7m6", "Z9x8Y7w6V5u4T3s2R1q0"),
        (JWT[:25], JWT[:25]),  # a cut-off JWT header: no second dot, not a JWT to redact()
    ],
)
def test_redact_value_masks_assigned_secrets_and_token_like_runs(text: str, secret: str) -> None:
    masked = redaction.redact_value(text)
    assert secret not in masked
    assert MASK in masked


@pytest.mark.parametrize(
    "text", ["inference-gateway-tls", "2160h", "my-registry-pull-secret", "resources.limits.cpu", "500m"]
)
def test_redact_value_leaves_names_and_quantities_alone(text: str) -> None:
    assert redaction.redact_value(text) == text


@pytest.mark.parametrize(
    "text",
    [
        '"mistral-7b-instruct-v0.3" is already served',
        "meta-llama/Llama-3.1-8B-Instruct",
        "uid 1fe2e3c1-f25e-46ad-89ad-fe4bd7c71772",
        "spec.schedulers[1].modelName: duplicates spec.schedulers[0].modelName",
    ],
)
def test_redact_value_leaves_model_names_paths_and_uids_alone(text: str) -> None:
    assert redaction.redact_value(text) == text


@pytest.mark.parametrize(
    "text",
    [
        "IAM role EksClusterKubectlProviderHandlerServiceRole2B48112A",
        "AWS::ElasticLoadBalancingV2::LoadBalancer Alb",
        "attached AmazonEC2ContainerRegistryReadOnly",
    ],
)
def test_redact_value_leaves_cdk_logical_ids_and_aws_type_names_alone_when_asked(text: str) -> None:
    """Only where the caller wrote the names (an audit result's resource): by default they are masked,
    as a password of that shape must be."""
    assert redaction.redact_value(text, identifiers=True) == text
    assert MASK in redaction.redact_value(text)


@pytest.mark.parametrize(
    "password",
    [
        "CorrectHorseBatteryStaple12345678",
        "MySuperSecretPasswordABCDEF12",
        "SecretTokenValueABCDEF1234567890",
    ],
)
def test_a_password_shaped_like_a_logical_id_stays_masked_by_default(password: str) -> None:
    """s38 first left every CamelCase run with an 8-character hex end readable, in every text: these
    passwords, masked before, went through any log line or error message quoting them."""
    assert redaction.redact_value(f"value {password} here") == f"value {MASK} here"


@pytest.mark.parametrize(
    "secret",
    [
        "AKIAIOSFODNN7EXAMPLEKEY1",  # capitals and digits, no words
        "S3cretPassw0rd9XYZqq",  # digits beside small letters
        "MySecretPassword2024",  # digits after small letters
        "Zk3LmQxTbVnRpWyQ0A1B2C3D",  # ends like a CDK hash, but no two words before it
    ],
)
def test_identifier_shapes_do_not_unmask_secrets(secret: str) -> None:
    assert redaction.redact_value(f"value {secret} here", identifiers=True) == f"value {MASK} here"


@pytest.mark.parametrize(
    "text",
    [
        "scheme=Bearer realm=igw-gateway status=401",
        "WWW-Authenticate: Bearer realm=chat.llm.example.com, error=invalid_token, error_description=expired",
        "challenge Bearer error=insufficient_scope,scope=chat.completions",
        'WWW-Authenticate: Basic realm="igw", charset="UTF-8"',
        "Basic realm=internal-gateway-admin",
    ],
)
def test_a_challenge_s_parameters_after_the_scheme_word_stay(text: str) -> None:
    """``Bearer realm=igw-gateway``: the value after the scheme word was masked as a token, hiding
    which realm or error a 401 named; an ``auth-param`` is never a ``b64token``."""
    assert redact(text) == text


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("Bearer mF_9.B5f-4.1JqM status=401 tenant=a", f"Bearer {MASK} status=401 tenant=a"),
        ("Basic dXNlcjpwYXNzd29yZA== realm=x", f"Basic {MASK} realm=x"),
        ("Bearer key=sk-live-abcdefgh12345678 next", f"Bearer {MASK} next"),  # not a challenge's name
        ("bearer abc123def456ghi/789+xyz==, error=invalid_token", f"bearer {MASK}, error=invalid_token"),
    ],
)
def test_a_token_after_the_scheme_word_is_masked_and_the_rest_of_the_line_kept(text: str, shown: str) -> None:
    assert redact(text) == shown


@pytest.mark.parametrize(
    "text",
    [
        "Bearer authorization_required_by_policy",  # prose in snake case: masked all the same
        "refused Bearer team-alpha-shared-key",  # a token a person chose, words and hyphens
        "Bearer staging_gateway_admin_token",
    ],
)
def test_words_joined_by_hyphens_or_underscores_after_the_scheme_word_stay_masked(text: str) -> None:
    """A run of words joined by ``-`` or ``_`` cannot be told from a static token a person chose
    (``team-alpha-shared-key``): no rule shows the one and hides the other, so both are masked."""
    assert redact(text).endswith(f"Bearer {MASK}")


_HINT_PIECES = st.one_of(
    st.sampled_from(["x", "max_", '"', "'", "\\", " ", "\t", ":", "=", "[", "(", "b", "\n", "#"]),
    st.tuples(
        st.sampled_from(["", "x", "max_", " ", "\n", '"']),
        st.sampled_from(redaction._QUOTED_WORDS),
        st.sampled_from(["", '"', "'", '\\"', "\\\\'"]),
        st.sampled_from(["", " ", "  ", "\t", " \t"]),
        st.sampled_from([":", "="]),
        st.sampled_from(["", " ", '"', "'", "[", "(", "{", 'b"', " '", "x"]),
    ).map("".join),
)
"""Pieces of a text: a secret word, what may come between it and a ``:``/``=``, and what may follow."""


@settings(max_examples=1500, deadline=None)
@given(st.lists(_HINT_PIECES, max_size=4).map("".join))
def test_the_one_field_hint_finds_every_text_a_field_rule_s_own_hint_finds(text: str) -> None:
    """:func:`redact` and :func:`needs_redaction` skip the JSON-field, keyword and configuration rules
    when the one folded hint finds nothing (a clean line pays one search, not three): it must find
    every text that one of those rules' own hints finds, or a secret would go through unscanned."""
    if redaction._FIELD_HINT.search(text) is None:
        assert redaction._QUOTED_HINT.search(text) is None
        assert not redaction._keyword_secrets(text)
        assert not redaction._config_secrets(text)


@pytest.mark.parametrize(
    "text",
    [
        "ExpiredTokenException: The security token included in the request is expired",
        "InvalidClientTokenId: The security token included in the request is invalid.",
        "InvalidSecretException: Secret is not valid",
        "botocore.exceptions.NoCredentialsError: Unable to locate credentials",
        "PartialCredentialsError: Partial credentials found in env, missing: AWS_SECRET_ACCESS_KEY",
        "TokenRetrievalError: Error when retrieving token from sso: Token has expired and refresh failed",
        "SSOTokenLoadError: Error loading SSO Token: Token for x does not exist",
        "InvalidIdentityTokenException: Couldn't retrieve verification key from your identity provider",
        "jwt.exceptions.InvalidTokenError: Invalid header padding",
        "oauthlib.oauth2.rfc6749.errors.TokenExpiredError: (token_expired)",
        "PasswordPolicyViolation: Password should have at least one uppercase letter",
        "ExpiredToken: The provided token has expired.",
        "sts:GetSessionToken: An error occurred",
        "GetSecretValue: Access denied for the role",
        "User: arn:aws:iam::123456789012:user/x is not authorized to perform: secretsmanager:GetSecretValue "
        "on resource: arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/db-AbCdEf",
        "Action: secretsmanager:*",
        "credentials: check your profile",
        "AWS credentials: Unable to locate credentials: refresh them",
        "getting credentials: exec: executable aws failed with exit code 255",
        "Secret: not found in namespace igw",
        "spec.extensions.rateLimit.redis.passwordEnv: environment variable REDIS_PW is not set or empty",
        "spec.auth.clientSecret: must not be empty",
        "cannot load cluster credentials: not running in a pod and no kubeconfig at ~/.kube/config",
    ],
)
def test_redact_value_leaves_error_names_and_their_prose_alone(text: str) -> None:
    """Until session s48 (round 14) the word after an error code or class holding a secret's word, or
    after a secret's name and a colon, was masked as its value: ``igw preflight`` reported
    ``NoCredentialsError: [REDACTED] to locate credentials``, ``ExpiredTokenException: [REDACTED]
    security token ...``, ``secretsmanager:[REDACTED]`` for the IAM action of an AccessDenied message."""
    assert redaction.redact_value(text) == text
    assert redaction.redact_value(text, identifiers=True) == text


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("token: eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdefgh", f"token: {MASK}"),
        ("aws_secret_access_key: wJalrXUtnFEMI/K7MDENG", f"aws_secret_access_key: {MASK}"),
        ("Secret: s3cr3t-v4lue", f"Secret: {MASK}"),
        ("Secret: Sunshine", f"Secret: {MASK}"),  # one word: a password as likely as prose
        ("Token: expired", f"Token: {MASK}"),
        ("Password: Hunter2 is the one", f"Password: {MASK} is the one"),
        ("password: correct horse battery staple", f"password: {MASK} horse battery staple"),
        ('client_secret: "Sunshine is the one"', f'client_secret: "{MASK}"'),
        ("client_secret=Sunshine is the one", f"client_secret={MASK} is the one"),
        ("InvalidTokenError: abc123 is bad", f"InvalidTokenError: {MASK} is bad"),
        ("client_secret: Rosebud and more", f"client_secret: {MASK} and more"),
        ("password: Sunshine is the one", f"password: {MASK} is the one"),
        ("token: hunter for the win", f"token: {MASK} for the win"),
        ("InvalidPasswordException=hunter", f"InvalidPasswordException={MASK}"),
        ("secretsmanager: hunter2", f"secretsmanager: {MASK}"),
        ("secretsmanager:Hunter2", f"secretsmanager:{MASK}"),
    ],
)
def test_redact_value_still_masks_secrets_after_their_names(text: str, masked: str) -> None:
    """Round 14's prose test keeps a word after an error's name, a sentence (a word with a function
    word among the next ones) after a secret's name and ``: ``; a value with a digit or symbol, a lone
    word, words without a function word (a passphrase), a quoted value and ``name=value`` stay masked.
    Until session s49 (round 17) a one-word secret followed by prose (``client_secret: Rosebud and
    more``) was shown whole as a sentence; now a sentence is kept only when its first word is one error
    prose opens with (:data:`igw.redaction._PROSE_OPENERS`)."""
    assert redaction.redact_value(text) == masked


@settings(max_examples=500, deadline=None)
@given(
    name=st.sampled_from(
        [
            "ExpiredTokenException",
            "jwt.InvalidTokenError",
            "InvalidClientTokenId",
            "credentials",
            "Secret",
            "secretsmanager",
            "GetSecretValue",
            "password",
        ]
    ),
    separator=st.sampled_from([": ", ":", ":\t", " = ", "="]),
    secret=st.from_regex(r"[A-Za-z]{0,6}[0-9][A-Za-z0-9+/_-]{0,10}", fullmatch=True),
    after=st.sampled_from(["", " is the one", " for the role", ".", " not set"]),
)
def test_no_value_holding_a_digit_goes_through_after_a_secret_s_or_an_error_s_name(
    name: str, separator: str, secret: str, after: str
) -> None:
    """Whatever name and prose surround it, round 14's exemptions never keep a value with a digit."""
    assert secret not in redaction.redact_value(f"{name}{separator}{secret}{after}")


COUNT_NAMES = [
    "max_tokens",
    "max_completion_tokens",
    "max_new_tokens",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "num_tokens",
    "input_tokens",
    "cached_tokens",
    "tokensPerMinute",
    "tokenBurst",
    "token_budget",
    "maxTokenBytes",
    "chars_per_token",
    "CHARS_PER_TOKEN",
    "prompt_token_ids",
    "x-ratelimit-remaining-tokens",
    "spec.extensions.rateLimits.default.tokenBurst",
    "token.maxAge",
]
TOKEN_NAMES = [
    "token",
    "access_token",
    "id_token",
    "refresh_token",
    "bearer_token",
    "hf_token",
    "tokenSecret",
    "api_token",
    "session_token",
    "x-amz-security-token",
    "token_id",
    "input_token",
    "rateLimits.token",
    "refresh_token_max",
    "api_token_limit",
    "hfTokenPerMinute",
]


@pytest.mark.parametrize("name", COUNT_NAMES)
@pytest.mark.parametrize(
    "shape", ['{{"{0}": 100, "model": "m"}}', "{0}: 100", "{0}=100", "{0} = 100", "{0}: [1, 2]"]
)
def test_a_number_of_tokens_is_shown_after_its_name(name: str, shape: str) -> None:
    """Until session s49 (round 18) :func:`redact_value` masked the value of every name holding
    ``token``: an add-on or configuration error quoting a rate limit showed ``{"tokensPerMinute":
    [REDACTED], "tokenBurst": [REDACTED]}``, an OpenAI request ``max_tokens: [REDACTED]``. Both
    functions keep a count by the one rule (:func:`igw.redaction.names_a_count`)."""
    text = shape.format(name)
    assert redaction.names_a_count(name)
    assert redaction.redact_value(text) == text
    assert redact(text) == text


@pytest.mark.parametrize("name", TOKEN_NAMES)
def test_a_token_s_name_keeps_its_value_masked_whatever_count_word_it_holds(name: str) -> None:
    assert not redaction.names_a_count(name)
    for text in (f"{name}: s3cr3t-v4lue", f'{{"{name}": "s3cr3t-v4lue"}}', f"{name}=s3cr3t-v4lue"):
        assert "s3cr3t-v4lue" not in redaction.redact_value(text), text
    assert "12345" not in redaction.redact_value(f'{{"{name}": 12345}}')


@pytest.mark.parametrize(
    "name", ["token", "access_token", "id_token", "hf_token", "api_token", "session_token"]
)
def test_redact_masks_a_token_s_name_its_count_rule_keeps(name: str) -> None:
    """:func:`redact` (names ending in ``token``) masks what it masked before the count rule."""
    for text in (f'{{"{name}": "s3cr3t-v4lue"}}', f"{name}=s3cr3t-v4lue", f"{name}: s3cr3t4"):
        assert "s3cr3t" not in redact(text), text


@settings(max_examples=300, deadline=None)
@given(
    credential=st.sampled_from(
        ["access", "refresh", "id", "session", "bearer", "api", "hf", "secret", "auth"]
    ),
    count=st.sampled_from(["max", "per_minute", "burst", "budget", "total", "count", "limit", "ids"]),
    order=st.booleans(),
    secret=st.from_regex(r"[A-Za-z]{0,4}[0-9][A-Za-z0-9]{2,8}", fullmatch=True),
)
def test_a_count_word_never_unmasks_a_named_credential(
    credential: str, count: str, order: bool, secret: str
) -> None:
    name = f"{credential}_token_{count}" if order else f"{count}_{credential}_token"
    assert secret not in redaction.redact_value(f"{name}: {secret}")
    assert secret not in redaction.redact_value(f'{{"{name}": "{secret}"}}')


@pytest.mark.parametrize(
    "text",
    [
        "no token: HTTP 401",
        "api_key: Field required",
        "secret: HTTP 503 Service Unavailable",
        "max_tokens: Field required",
    ],
)
def test_an_http_status_or_a_missing_field_after_a_secret_s_name_is_a_message(text: str) -> None:
    """``HTTP 401`` and pydantic's ``Field required`` after a secret's name read ``[REDACTED] 401`` and
    ``[REDACTED] required`` until session s49 (round 18)."""
    assert redaction.redact_value(text) == text


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("api_key: 1234", f"api_key: {MASK}"),  # digits only: a PIN
        ("token=HTTP 401", f"token={MASK} 401"),
        ("token: HTTP 4011", f"token: {MASK} 4011"),
        ("password: Field requiredness", f"password: {MASK} requiredness"),
    ],
)
def test_digits_and_near_messages_after_a_secret_s_name_stay_masked(text: str, masked: str) -> None:
    assert redaction.redact_value(text) == masked


MESSAGE_TEMPLATES = [
    'spec.podDefaults.envFrom[0].secretRef.bogus: unknown field "spec.x.bogus"',
    'spec.podDefaults.env[0].valueFrom.secretKeyRef.key: missing required field "spec.x.key"',
    "spec.extensions.rateLimits.redis.passwordEnv: expected string, got integer [schema.type]",
    "spec.podDefaults.envFrom[0].secretRef: expected object, got string",
    "spec.labels.token: key must be a label key; got 1",
    "api_key: String should have at least 8 characters",
    "api_key: String should match pattern '^sk-'",
    "api_key: Extra inputs are not permitted",
    "api_key: Input should be a valid string",
    "client_secret: Value error, must start with sk-",
    "password: Missing required argument",
    "spec.tokenSecretRef: Required value",
    "spec.token: Forbidden: may not be set",
    "spec.tokenSecretRef.name: Too long: may not be more than 253 bytes",
    "SecretString: Invalid type for parameter SecretString, value: [REDACTED], type: <class 'int'>",
]


@pytest.mark.parametrize("text", MESSAGE_TEMPLATES)
def test_a_library_s_or_the_project_s_message_after_a_secret_s_name_is_kept(text: str) -> None:
    """Until session s49 (round 19) the first word of these was masked (``[REDACTED] required field``,
    ``[REDACTED] inputs are not permitted``, ``[REDACTED] value``): it was not one of the opener
    words, or no function word followed it (:data:`igw.redaction._MESSAGE_TEMPLATE`)."""
    assert redaction.redact_value(text) == text


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("password: String and more", f"password: {MASK} and more"),
        ("password: String should be fine", f"password: {MASK} should be fine"),
        ("token: Required", f"token: {MASK}"),
        ("token: Required values", f"token: {MASK} values"),
        ("token: Forbidden", f"token: {MASK}"),
        ("token: Input", f"token: {MASK}"),
        ("token: expected abc", f"token: {MASK} abc"),
        ("token: unknown fields", f"token: {MASK} fields"),
        ("token: key must", f"token: {MASK} must"),
        ("password: Extra inputs", f"password: {MASK} inputs"),
        ("password: Missing", f"password: {MASK}"),
        ("token: 's3cr3t' is not of type 'integer'", f"token: '{MASK}' is not of type 'integer'"),
    ],
)
def test_a_secret_word_opening_a_message_s_phrase_stays_masked(text: str, masked: str) -> None:
    """A template is a whole fixed phrase: a one-word secret followed by other words is a value."""
    assert redaction.redact_value(text) == masked


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ('spec.token: Invalid value: "s3cr3t": must be', f"spec.token: Invalid value: {MASK}: must be"),
        ('api_key: Unsupported value: "s3cr3t": supported values: "a"', None),
        ('api_key: Duplicate value: "s3cr3t"', f"api_key: Duplicate value: {MASK}"),
        ('spec.tokenSecretRef.name: Not found: "s3cr3t"', f"spec.tokenSecretRef.name: Not found: {MASK}"),
        ('{"message": "spec.token: Invalid value: \\"s3cr3t\\": bad"}', None),
        ('spec.token: Invalid value: "s3\\"cr3t": bad', f"spec.token: Invalid value: {MASK}: bad"),
        ("spec.token: Invalid value: s3cr3t", f"spec.token: Invalid value: {MASK}"),
    ],
)
def test_a_kubernetes_field_error_keeps_its_type_and_masks_the_value_it_quotes(
    text: str, masked: str | None
) -> None:
    """Until session s49 (round 19) ``spec.token: Invalid value: "s3cr3t"`` read ``[REDACTED] value:
    "s3cr3t"``: the error's type masked, the value it quotes shown."""
    shown = redaction.redact_value(text)
    assert "s3" not in shown
    assert "cr3t" not in shown
    assert masked is None or shown == masked
    assert "value: " + MASK in shown or "found: " + MASK in shown


def test_the_operator_s_refusal_names_a_secret_reference_s_problem_in_words() -> None:
    """The operator's ``Accepted`` condition (:func:`igw.operator.admission.spec_problems`) read
    ``secretKeyRef.key: [REDACTED] required field`` and ``passwordEnv: [REDACTED] string, got
    integer`` until session s49 (round 19)."""
    doc = igwc("demo")
    doc["spec"]["podDefaults"] = {"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s"}}}]}
    doc["spec"]["extensions"] = {"rateLimits": {"redis": {"url": "redis://r:6379", "passwordEnv": 5}}}
    lines = admission.spec_problems(doc)
    assert any("secretKeyRef.key: missing required field" in line for line in lines), lines
    assert any("passwordEnv: expected string, got integer" in line for line in lines), lines
    assert not any(MASK in line for line in lines), lines


def test_igw_validate_and_the_add_on_show_a_misplaced_rate_limit_s_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rate limit indented under ``backend`` is quoted by the enum's message; its counts were
    ``[REDACTED]`` until session s49 (round 18), in ``igw validate`` and in the add-on's errors."""
    limits = {"tokensPerMinute": 5000, "tokenBurst": 300}
    doc = base_document()
    doc["spec"]["extensions"] = {"rateLimits": {"backend": limits}}
    path = tmp_path / "limits.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert main(["validate", str(path)]) == 1
    out, _ = capsys.readouterr()
    assert 'got {"tokensPerMinute": 5000, "tokenBurst": 300}' in out, out
    found = addon_problems({"gateway": {"workers": limits}})
    assert any('got {"tokensPerMinute": 5000, "tokenBurst' in problem for problem in found), found


def _botocore_error(**params: object) -> str:
    """botocore's own text for a call whose parameters fail its validation (raised before any request)."""
    import boto3
    from botocore.exceptions import ParamValidationError

    client = boto3.client(
        "secretsmanager", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y"
    )
    with pytest.raises(ParamValidationError) as raised:
        client.put_secret_value(**params)
    return str(raised.value)


def test_botocore_s_validation_error_masks_a_secret_parameter_s_value_and_shows_the_others() -> None:
    """Round 20 (session s49): ``Invalid type for parameter SecretString, value: 12345, type: ...`` showed
    the value, ``value`` being no secret's name; a parameter that names no secret keeps its value."""
    text = _botocore_error(SecretId=98765, SecretString=12345, ClientRequestToken=["tok-4242"])
    shown = redaction.redact_value(text)
    assert "12345" in text
    assert "tok-4242" in text
    assert "12345" not in shown
    assert "tok-4242" not in shown
    assert f"parameter SecretString, value: {MASK}, type: <class 'int'>, valid types: <class 'str'>" in shown
    assert "parameter SecretId, value: 98765, type: <class 'int'>" in shown
    cut = redaction.redact_value("Invalid type for parameter SecretBinary, value: {'k': 'v, w")
    assert cut == f"Invalid type for parameter SecretBinary, value: {MASK}"


def test_pydantic_s_validation_error_masks_a_secret_field_s_input_and_shows_the_others() -> None:
    """Round 20 (session s49): pydantic v2's ``input_value=`` after a secret-named location line showed the
    input; a field that names no secret (``model``) and a token count keep theirs."""
    import pydantic

    class Settings(pydantic.BaseModel):
        api_key: str
        model: str
        max_tokens: int

    with pytest.raises(pydantic.ValidationError) as raised:
        Settings.model_validate({"api_key": 12345, "model": 67890, "max_tokens": "lots-of-them"})
    text = str(raised.value)
    shown = redaction.redact_value(text)
    assert "input_value=12345" in text
    assert (
        f"api_key\n  Input should be a valid string [type=string_type, input_value={MASK}, input_type=int]"
        in shown
    )
    assert "input_value=67890" in shown
    assert "input_value='lots-of-them'" in shown


def test_a_kubernetes_value_neither_quoted_nor_one_token_is_masked_to_the_colon_after_it() -> None:
    """Round 20 (session s49): ``Invalid value: map[string]interface {}{...}`` was masked up to its first
    blank, the rest shown; through the add-on's AWS error path too (:func:`igw.addon.eks_api._wrap`)."""
    from botocore.exceptions import ClientError

    from igw.addon.eks_api import _wrap

    text = 'spec.token: Invalid value: map[string]interface {}{"v":"s3cr3t x"}: must be a string'
    assert redaction.redact_value(text) == f"spec.token: Invalid value: {MASK}: must be a string"
    error = ClientError({"Error": {"Code": "InvalidParameterException", "Message": text}}, "CreateAddon")
    assert "s3cr3t" not in str(_wrap("CreateAddon", error))
    kept = 'spec.model: Invalid value: map[string]interface {}{"v":"llama x"}: must be a string'
    assert redaction.redact_value(kept) == kept


def _every_entry_point(text: str) -> dict[str, str]:
    """``text`` as each public path writes it: :func:`redact`, :func:`redaction.redact_value`, the log
    formatter with :data:`LOG_FORMAT`'s prefix and message-only, a JSON log line's field, a repr."""
    from igw.gateway.redaction import LOG_FORMAT, redact_line

    record = logging.LogRecord("igw.x", logging.ERROR, __file__, 1, text, None, None)
    return {
        "redact": redact(text),
        "redact_value": redaction.redact_value(text),
        "formatter": RedactingFormatter(LOG_FORMAT).format(record),
        "message-only": RedactingFormatter("%(message)s").format(record),
        "json line": redact_line(json.dumps({"error": text})),
        "repr": redact(repr(text)),
    }


def _pydantic_error(**values: object) -> str:
    import pydantic

    class Settings(pydantic.BaseModel):
        api_key: str
        model: str

    with pytest.raises(pydantic.ValidationError) as raised:
        Settings.model_validate(values)
    return str(raised.value)


@pytest.mark.parametrize(
    ("text", "secret", "kept"),
    [
        (
            lambda: _botocore_error(SecretId="igw-redis", SecretString=982451653),
            "982451653",
            f"parameter SecretString, value: {MASK}, type: <class 'int'>",
        ),
        (lambda: _pydantic_error(api_key=982451653, model="llama"), "982451653", f"input_value={MASK},"),
        (
            lambda: 'spec.token: Invalid value: "hunter2x9": must be no more than 8 characters',
            "hunter2x9",
            f"spec.token: Invalid value: {MASK}: must be",
        ),
    ],
)
def test_every_entry_point_masks_a_library_s_validation_error_value(
    text: Callable[[], str], secret: str, kept: str
) -> None:
    """Round 21 (session s50): round 20's rules ran in :func:`redaction.redact_value` only, and a log line,
    the access log's JSON ``error`` and a logged traceback showed the value; one rule set now."""
    error = text()
    assert secret in error
    for path, shown in _every_entry_point(error).items():
        assert secret not in shown, path
        if path in ("redact", "redact_value", "message-only"):
            assert kept in shown, path
    assert redaction.needs_redaction(error)
    assert redaction.needs_redaction(json.dumps(error))


@pytest.mark.parametrize(
    "text",
    [
        'Secret "x" is invalid: [data[password]: Invalid value: "hunter2x9": a valid config key must consist',
        'Secret "x" is invalid: stringData[api-key]: Invalid value: "hunter2x9": must be no more than 8',
        "1 validation error for Settings\nstringData[api-key]\n  String should have at least 64 characters "
        "[type=string_too_short, input_value='hunter2x9', input_type=str]",
    ],
)
def test_a_secret_s_key_in_brackets_or_with_a_hyphen_has_its_quoted_value_masked(text: str) -> None:
    """Round 21 (session s50): the bracket of a Kubernetes index ended the name, and ``api-key`` was no
    secret's name, so the value went through every path, :func:`redaction.redact_value` included."""
    for path, shown in _every_entry_point(text).items():
        assert "hunter2x9" not in shown, path


@pytest.mark.parametrize(
    "text",
    [
        "helm upgrade igw addon --set redis.password=hunter2x9 --set model=llama",
        "user[password]=hunter2x9&user[name]=bob",
    ],
)
def test_a_dotted_or_indexed_form_field_s_value_is_masked(text: str) -> None:
    """Round 21 (session s50): a ``.`` before a secret's name or a ``]`` after it ended the form rule's
    match, and ``--set redis.password=...`` went to the logs as it was."""
    shown = redact(text)
    assert "hunter2x9" not in shown
    assert MASK in shown
    assert "model=llama" in shown or "user[name]=bob" in shown
    assert redaction.needs_redaction(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("maxTokensPerMinute=5000", "maxTokensPerMinute=5000"),
        (
            "spec.tokenizerPath: /models/llama/tokenizer.json",
            "spec.tokenizerPath: /models/llama/tokenizer.json",
        ),
        ('spec.tokenizer: Invalid value: "meta-llama/x": not found', None),
        ("model=Zq9xW2vK7pLmN4rT12345", f"model={MASK}"),
        ("token=tokenizer", f"token={MASK}"),
        (
            'spec.tokenizerToken: Invalid value: "hunter2x9": bad',
            f"spec.tokenizerToken: Invalid value: {MASK}: bad",
        ),
    ],
)
def test_run_together_names_that_name_no_secret_keep_their_values(text: str, expected: str | None) -> None:
    """Round 21 (session s50): :func:`redaction.redact_value` read ``maxTokensPerMinute=5000`` as one
    token-like run (``[REDACTED]``, its name too) and ``tokenizer`` as a token's name. A value after
    ``=`` that is a token by itself, and a real token's name after ``tokenizer``, stay masked."""
    assert redaction.redact_value(text) == (text if expected is None else expected)


_LIBRARY_SHAPES = (
    "HTTPSConnectionPool(host='otel.example', port=4318): Max retries exceeded with url: "
    "/v1/traces?api_key={s} (Caused by NewConnectionError('refused'))",
    "Cannot connect to host h:443 ssl:default [url='https://u:{s}@h/x']",
    "401, message='Unauthorized', url=URL('https://idp.example/token?client_secret={s}')",
    "An error occurred (ValidationException) when calling the PutSecretValue operation: "
    "Invalid length for parameter {p}, value: {s}, valid min length: 40",
    "Parameter validation failed:\nInvalid type for parameter {p}, value: {s}, type: <class 'int'>, "
    "valid types: <class 'str'>",
    "(422)\nReason: Unprocessable Entity\nHTTP response headers: HTTPHeaderDict({{'Audit-Id': 'a', "
    '\'Authorization\': \'Bearer {s}\'}})\nHTTP response body: {{"kind":"Status","message":"Secret '
    '\\"x\\" is invalid: {n}: Invalid value: \\"{s}\\": must be no more than 63 characters"}}',
    'Secret "x" is invalid: [metadata.name: Required value, {n}: Invalid value: "{s}": a valid config key]',
    "2 validation errors for Settings\nmodel\n  Field required [type=missing, input_value={{}}, "
    "input_type=dict]\n{n}\n  Input should be a valid integer [type=int_parsing, input_value='{s}', "
    "input_type=str]",
    "jwt.exceptions.DecodeError: Invalid token type. Token must be a <class 'bytes'>: Bearer {s}",
)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(_LIBRARY_SHAPES),
    st.sampled_from(
        [
            "password",
            "api_key",
            "client_secret",
            "spec.redis.password",
            "data[password]",
            "stringData[api-key]",
        ]
    ),
    st.sampled_from(["SecretString", "Password", "SessionToken", "SecretBinary"]),
    st.text("abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789", min_size=10, max_size=28).filter(
        lambda s: any(c.isdigit() for c in s) and any(c.isalpha() for c in s)
    ),
)
def test_no_secret_survives_a_library_s_exception_text_on_any_path(
    shape: str, name: str, parameter: str, secret: str
) -> None:
    """Secret-bearing texts in the shapes urllib3, aiohttp, botocore, the kubernetes client, pydantic and
    PyJWT write their errors in, through every public path (:func:`_every_entry_point`)."""
    text = shape.format(n=name, p=parameter, s=secret)
    for path, shown in _every_entry_point(text).items():
        assert secret not in shown, (path, shown)


def _logged(fmt: str, message: str, *args: object) -> str:
    """What a real :class:`logging.Logger` writes for ``log.error(message, *args)`` through the
    project's formatter with format ``fmt``."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(RedactingFormatter(fmt))
    log = logging.getLogger("igw.tests.round22")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.error(message, *args)
    finally:
        log.removeHandler(handler)
    return stream.getvalue()


@pytest.mark.parametrize("worker", [None, 3])
@pytest.mark.parametrize(
    ("message", "kept"),
    [
        ("client_secret: %s", "client_secret: "),
        ("password = %s", "password = "),
        ("api_key: %s\nretrying", "\nretrying"),
        (
            "1 validation error for Settings\napi_key\n  Input should be a valid string [type=string_type, "
            "input_value=%s, input_type=int]",
            "input_value=",
        ),
    ],
)
def test_a_prefixed_log_line_masks_what_the_message_alone_masks(
    worker: int | None, message: str, kept: str
) -> None:
    """Round 22 (session s50): with :data:`LOG_FORMAT`'s time, level and logger before it, a message's
    configuration line (``client_secret: <value>``) no longer started its line, and ``igw serve``,
    ``igw operator`` and ``igw global serve`` wrote the value; the access log's message-only formatter
    masked it. The message is redacted apart from the prefix now."""
    from igw.gateway.redaction import LOG_FORMAT, worker_log_format

    fmt = LOG_FORMAT if worker is None else worker_log_format(worker)
    alone = _logged("%(message)s", message, "Xq9vLp2wRt")
    prefixed = _logged(fmt, message, "Xq9vLp2wRt")
    assert "Xq9vLp2wRt" not in alone
    assert "Xq9vLp2wRt" not in prefixed, prefixed
    assert kept in prefixed
    assert prefixed.endswith(f"igw.tests.round22{'' if worker is None else f' [worker {worker}]'}: {alone}")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "client_secret: {s}",
                "password={s}",
                "token: expired",
                "token: {s}",
                "  - api_key: {s}",
                '{{"password": "{s}"}}',
                "Authorization: Bearer {s}",
                "redis://u:{s}@h:6379/0",
                "retrying in 2s",
                "Error: token: expired",
            ]
        ),
        min_size=1,
        max_size=3,
    ),
    st.text("abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789", min_size=10, max_size=24).filter(
        lambda s: any(c.isdigit() for c in s)
    ),
)
def test_the_prefixed_formatter_writes_its_prefix_then_the_message_only_formatter_s_line(
    lines: list[str], secret: str
) -> None:
    """Whatever the message (lines of configuration, JSON, headers, URLs and prose, one after another),
    the :data:`LOG_FORMAT` line is its prefix followed by what the message-only formatter writes (a
    JSON message the same JSON; the prefixed line keeps its spacing): the prefix hides no rule, and the
    secret is in neither."""
    from igw.gateway.redaction import LOG_FORMAT

    message = "\n".join(lines).format(s=secret)
    alone = _logged("%(message)s", "%s", message)
    prefixed = _logged(LOG_FORMAT, "%s", message)
    assert secret not in prefixed
    prefix = " ERROR igw.tests.round22: "
    assert prefix in prefixed
    shown = prefixed.split(prefix, 1)[1]
    assert shown == alone or json.loads(shown) == json.loads(alone), (prefixed, alone)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("params: SecretString=hunter2x9 SecretId=igw", f"params: SecretString={MASK} SecretId=igw"),
        (
            "{'SecretId': 'igw', 'SecretString': 'hunter2x9'}",
            f"{{'SecretId': 'igw', 'SecretString': '{MASK}'}}",
        ),
        (
            'b\'{"SecretId":"igw","SecretBinary":"hunter2x9"}\'',
            f'b\'{{"SecretId":"igw","SecretBinary":"{MASK}"}}\'',
        ),
        ("invalid config: spec.redis.password: hunter2x9", f"invalid config: spec.redis.password: {MASK}"),
        ("auth.0.token: hunter2x9", f"auth.0.token: {MASK}"),
        ("error at auth[0].token: hunter2x9 (line 3)", f"error at auth[0].token: {MASK} (line 3)"),
        ("spec.redis.password: must be set", None),
        ("x spec.auth.token: expired", None),
        ("x spec.rateLimits.maxTokens: 500", None),
        ("Error: token: expired", None),
        ("the SecretString is empty", None),
    ],
)
def test_secrets_manager_values_and_a_dotted_path_s_value_mid_line_are_masked_by_redact(
    text: str, expected: str | None
) -> None:
    """Round 22 (session s50): :func:`redact` (logs, the access log) showed botocore's ``SecretString``/
    ``SecretBinary`` (masked by :func:`redaction.redact_value` only) and a configuration error's dotted
    path value unless the path started its line; prose after a path (``must be set``) stays."""
    assert redact(text) == (text if expected is None else expected)
    assert redaction.needs_redaction(text) is (expected is not None)


@pytest.mark.parametrize(
    "text",
    [
        "user[password]%3DXq9vLp2wRt7k",
        "user%5Bpassword%5D%3DXq9vLp2wRt7k",
        "user%5Bpassword%5D=Xq9vLp2wRt7k",
        "a=1&user%5bpassword%5d=Xq9vLp2wRt7k&b=2",
        "user%255Bpassword%255D%253DXq9vLp2wRt7k",
        "x-api-key%3DXq9vLp2wRt7k",
        "q=a%20password%3DXq9vLp2wRt7k",
    ],
)
def test_a_percent_encoded_indexed_form_field_is_masked_on_every_path(text: str) -> None:
    """Round 23 (session s50): an encoded ``[``/``]``/``=`` around a secret's name (once or twice), an
    encoded character before it, and ``api-key`` as a name's word went through every path, where
    ``password%3D...`` was masked."""
    assert redaction.needs_redaction(text)
    for path, shown in _every_entry_point(text).items():
        assert "Xq9vLp2wRt7k" not in shown, (path, shown)
        assert MASK in shown, (path, shown)


@pytest.mark.parametrize(
    "text",
    [
        "password\uff1dXq9vLp2wRt7k",
        "client_secret\uff1a Xq9vLp2wRt7k",
        "api_key\u2236Xq9vLp2wRt7k",
        "a=1\uff06token\ufe66Xq9vLp2wRt7k",
        "\uff50\uff41\uff53\uff53\uff57\uff4f\uff52\uff44=Xq9vLp2wRt7k",
        '{"msg": "API_KEY\uff1dXq9vLp2wRt7k"}',
    ],
)
def test_a_lookalike_separator_or_name_is_read_as_its_ascii_form(text: str) -> None:
    """Round 23 (session s50): a fullwidth ``＝``/``：``/``＆``, a ratio sign or a fullwidth name hid the
    secret after it from every rule."""
    assert redaction.needs_redaction(text)
    for path, shown in _every_entry_point(text).items():
        assert "Xq9vLp2wRt7k" not in shown, (path, shown)


@pytest.mark.parametrize(
    "text", ["température\uff1a 20°C", "\uff48\uff45\uff4c\uff4c\uff4f\uff1dworld", "naïve＝ok"]
)
def test_a_text_with_lookalikes_and_no_secret_is_left_as_it_was(text: str) -> None:
    """The ASCII forms are written only where a secret was masked."""
    assert redact(text) == text
    assert redaction.redact_value(text) == text


@pytest.mark.parametrize(
    "text",
    [
        "secretsManagerArn: arn:aws:secretsmanager:us-east-1:123456789012:secret:igw/redis-AbCdEf",
        "spec.auth.secretsManagerArn: arn:aws-us-gov:secretsmanager:us-gov-west-1:123456789012:secret:x",
        "accessTokenLifetimeSeconds: 3600",
        "tokenTtl: 300s",
        "tokenEndpoint: https://idp.example/oauth2/token",
    ],
)
def test_redact_value_keeps_an_arn_a_duration_and_a_plain_url_after_a_secret_s_name(text: str) -> None:
    """Round 23 (session s50): an ARN names a secret, a lifetime counts seconds and a URL without
    user-info or query says where a token comes from; :func:`redaction.redact_value` masked each whole
    (``redact`` kept them)."""
    assert redaction.redact_value(text) == text


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("passwordSecretName: hunter2x9", "passwordSecretName: [REDACTED]"),
        ("tokenSecretRef.name: hunter2x9", "tokenSecretRef.name: [REDACTED]"),
        ("api_key: 1234", "api_key: [REDACTED]"),
        ("password: 3600", "password: [REDACTED]"),
        ("tokenEndpoint: https://u:hunter2x9@idp/token", "tokenEndpoint: [REDACTED]"),
        ("tokenEndpoint: https://idp/token?client_secret=hunter2x9", "tokenEndpoint: [REDACTED]"),
        ("password: arn:hunter2x9", "password: [REDACTED]"),
    ],
)
def test_redact_value_still_masks_what_may_be_a_pasted_secret(text: str, masked: str) -> None:
    """What round 23 keeps is an ARN, a number after a duration's name and a bare URL only."""
    assert redaction.redact_value(text) == masked


_EQUALS_LIKE = ["=", "%3D", "%3d", "%253D", "\uff1d", "\ufe66"]
_ATTACK_NAMES = [
    "password",
    "PassWord",
    "PASSWORD",
    "API_KEY",
    "x-api-key",
    "X-Api-Key",
    "client_secret",
    "access_token",
    "apiKey",
    "redis.password",
    "user[password]",
]


def _encoded(name: str, times: int) -> str:
    from urllib.parse import quote

    for _ in range(times):
        name = quote(name, safe="")
    return name


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(_ATTACK_NAMES),
    st.integers(0, 2),
    st.sampled_from(_EQUALS_LIKE),
    st.sampled_from(["{n}{e}{s}", "a=1&{n}{e}{s}&b=2", "retry {n}{e}{s} later", '{{"msg": "{n}{e}{s}"}}']),
    st.booleans(),
    st.text("abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789", min_size=10, max_size=24).filter(
        lambda s: any(c.isdigit() for c in s)
    ),
)
def test_no_encoded_mixed_case_or_lookalike_assignment_survives_any_path(
    name: str, times: int, equals: str, shape: str, nested: bool, secret: str
) -> None:
    """Round 23's attack: a secret's name in mixed case, percent-encoded once or twice, then ``=``
    plain, encoded once or twice or as a lookalike, in a form body, prose or a JSON string, that
    string itself inside another JSON (``nested``): every path masks it (:func:`_every_entry_point`;
    the JSON line as the access log writes it, orjson's UTF-8)."""
    text = shape.format(n=_encoded(name, times), e=equals, s=secret)
    if nested:
        text = json.dumps({"body": text}, ensure_ascii=False)
    for path, shown in _every_entry_point(text).items():
        assert secret not in shown, (path, text, shown)


_LONG_NAME_RUN = """
import resource, sys
resource.setrlimit(resource.RLIMIT_CPU, (20, 20))
from igw.redaction import redact, redact_value
run = "secretpasswordtoken" * 10_000
redact_value(run)
redact(run + " Invalid value: x")
assert redact_value("spec.redis.password: hunter2x9") == "spec.redis.password: [REDACTED]"
print("ok")
"""


def test_a_long_run_of_secret_words_is_redacted_in_bounded_time() -> None:
    """A run of name characters holding many secret words and no ``=``/``:`` after it was tried from
    every word to the run's end: 95 KB took :func:`redact_value` 20 s and :func:`redact` (a log line
    ending in ``Invalid value: x``) 9 s, growing as the square of the length (found in session s50).
    Bounded, 190 KB takes milliseconds; the child is given 20 s of CPU (unbounded: about 80 s)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _LONG_NAME_RUN],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(Path(redaction.__file__).resolve().parents[1]), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr[-2000:]


def test_a_secret_s_name_is_tried_once_per_run_of_name_characters() -> None:
    """Review 52 (session s50): the name of :data:`redaction._SECRET_ASSIGNMENT` and of
    :data:`redaction._FIELD_ERROR_VALUE` starts only where a run of name characters starts, not at
    every word boundary inside it: each start scanned the run to its end, so a long run (``a.a.a...``
    before ``value: ``, which brings :func:`redact`'s field-error rule onto a log line) cost its length
    squared; a 100 KB line held the log path for minutes. A name inside a run is still found whole."""
    for pattern in (redaction._SECRET_ASSIGNMENT, redaction._FIELD_ERROR_VALUE):
        text = 'a.spec.token: Invalid value: "hunter2x9"'
        assert pattern.match(text, 2) is None
        found = pattern.match(text)
        assert found is not None
        assert found.group(1) == "a.spec.token"
    long_run = "a." * 50_000 + "token: Invalid value: " + '"hunter2x9"'
    assert redact(long_run) == "a." * 50_000 + "token: Invalid value: " + MASK
    assert redaction.redact_value("api-key" * 15_000) == "api-key" * 15_000


@pytest.mark.parametrize(
    "text",
    [
        "\uff58Cookie: session=team-alpha-shared-key",
        "\uff58Authorization: team-alpha-shared-key",
        "\uff21\uff30\uff29Bearer team-alpha-shared-key",
        "token\uff1dabc123x9 \uff58Authorization: team-alpha-shared-key",
    ],
)
def test_a_lookalike_never_unmasks_what_its_own_form_masked(text: str) -> None:
    """Review 52 (session s50): round 23 read a text with lookalikes only in their ASCII forms, and a
    fullwidth letter glued before a header's name or ``Bearer`` (masked after any character but an
    ASCII letter) became an ASCII one, before which the rule keeps a camel-case word; the value,
    masked before round 23, was shown by every path and :func:`redaction.needs_redaction` judged the
    text clean. Each form is read now, the text as written first."""
    assert redaction.needs_redaction(text)
    for path, shown in _every_entry_point(text).items():
        assert "team-alpha-shared-key" not in shown, (path, shown)
        assert "abc123x9" not in shown, (path, shown)
