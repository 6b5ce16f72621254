"""Auto-issued TLS for ``spec.tls: {}``: a cert-manager Certificate, imported into ACM for the NLB listener.

An InferenceGatewayConfig whose ``spec.tls`` is present without an ``acmArn`` asks for a certificate
the operator obtains itself. The operator applies a cert-manager ``Certificate`` (owned by the
object, so garbage collection removes it) for the gateway Service's in-cluster DNS names, issued by
the issuer the operator is configured with; cert-manager writes the key pair into a Secret. Once
that Secret holds a certificate, the operator imports it into ACM (tagged with the object's uid),
and re-imports it under the same ARN whenever the Secret's certificate changes (cert-manager renewed
it). The ARN then goes on the Service's TLS listener exactly as a user-supplied ``acmArn`` would.
ACM has no owner references: the imported certificate is deleted when the operator sees the object
deleted, and only when its uid tag names that object (a user-supplied certificate is never touched);
one whose object went while no operator watched is found by its cluster, namespace and uid tags
(:mod:`igw.operator.tls_sweep`).

cert-manager leaves the Secret behind when its Certificate goes (unless it runs with
``--enable-certificate-owner-ref``), and keeps renewing a Certificate that nothing uses. So once the
object stops asking for auto-issue (and its ACM import is gone) or is deleted, the operator deletes
its Certificate and that Certificate's Secret: only a Secret cert-manager wrote for it (annotation
:data:`CERTIFICATE_NAME_ANNOTATION`) that carries the data plane's ownership labels, which the
Certificate's ``secretTemplate`` asks cert-manager to put on it (:func:`issued_secret`).

Auto-issue can be switched off (``igw operator --no-auto-tls``, chart ``operator.autoTls: false``):
the operator then never reads Secrets or Certificates, so its RBAC need not grant them, and reports
a ``tls: {}`` object ``AutoTlsDisabled`` instead.
"""

from __future__ import annotations

import base64
import hashlib
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from cryptography import x509

from igw.config.certificate_renewal import renewal_time
from igw.errors import IgwToolingError
from igw.redaction import redact_quoting_keys

CERT_MANAGER_API: Final = "cert-manager.io/v1"
CERTIFICATE_KIND: Final = "Certificate"
UID_TAG: Final = "igw.dev/inference-gateway-config-uid"
NAME_TAG: Final = "igw.dev/inference-gateway-config"
NAMESPACE_TAG: Final = "igw.dev/inference-gateway-config-namespace"
CLUSTER_TAG: Final = "igw.dev/cluster"
"""The cluster an import was made from: the uid of its ``kube-system`` Namespace (fixed for the
cluster's life). ACM is shared by every cluster of an account and region, so the orphan sweep
(:mod:`igw.operator.tls_sweep`) deletes only imports carrying this cluster's value."""
DEFAULT_ISSUER: Final = "ClusterIssuer/igw-selfsigned"
KUBE_ACCESS: Final[dict[tuple[str, str], frozenset[str]]] = {
    ("cert-manager.io", "certificates"): frozenset({"get", "create", "update", "delete"}),
    ("cert-manager.io", "issuers"): frozenset({"get"}),
    ("", "secrets"): frozenset({"get", "list", "delete"}),
}
"""The API access auto-issue needs on top of the data plane's, ``(group, resource): verbs`` (the
Certificate is applied like every data-plane object; the Secret is read, and deleted with the
Certificate once the object no longer uses them; the orphan sweep lists the Secrets carrying the
operator's labels; an ``Issuer`` named by ``--tls-issuer`` is read while a Certificate waits, to
say whether it exists and is Ready, :func:`issuer_problem`; the chart grants that one name only).
None of it with auto-issue switched off."""
CLUSTER_ACCESS: Final[dict[tuple[str, str], frozenset[str]]] = {
    ("", "namespaces"): frozenset({"get"}),
    ("cert-manager.io", "clusterissuers"): frozenset({"get"}),
}
"""Cluster-scoped access auto-issue needs: ``get`` on the ``kube-system`` Namespace (its uid is the
:data:`CLUSTER_TAG` value; the chart grants that one name only), and on the ``ClusterIssuer`` named
by ``--tls-issuer`` (:func:`issuer_problem`; that one name only)."""
ACM_LIST_ACTIONS: Final = ("acm:ListCertificates",)
"""IAM actions of the ACM calls :class:`AcmImporter` makes that take no resource ARN (finding the
certificate an object already owns)."""
ACM_CERTIFICATE_ACTIONS: Final = (
    "acm:GetCertificate",
    "acm:ListTagsForCertificate",
    "acm:ImportCertificate",
    "acm:AddTagsToCertificate",
    "acm:DeleteCertificate",
)
"""IAM actions of its calls on one certificate (an import with tags is authorised as both
``ImportCertificate`` and ``AddTagsToCertificate``). Together with :data:`ACM_LIST_ACTIONS`: what the
operator's IAM role must allow for auto-issued TLS (the CDK app's role grants exactly these)."""
CERTIFICATE_NAME_ANNOTATION: Final = "cert-manager.io/certificate-name"
"""What cert-manager writes on the Secret of a Certificate: that Certificate's name."""
_ISSUER_KINDS: Final = ("Issuer", "ClusterIssuer")
_OBJECT_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
"""A Kubernetes object name (DNS-1123 subdomain; at most 253 characters, checked apart)."""
_PEM_CERTIFICATE: Final = re.compile(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", re.DOTALL)
_PEM_BEGIN: Final = re.compile(r"-----BEGIN ([^-\r\n]{0,60})-----")
"""A PEM block's first line and its label (``CERTIFICATE``, ``EC PRIVATE KEY``, ...)."""


class TlsIssuerError(IgwToolingError, ValueError):
    """A ``--tls-issuer`` value that is not ``Issuer/NAME`` or ``ClusterIssuer/NAME``."""


@dataclass(frozen=True, slots=True)
class IssuerRef:
    """The cert-manager issuer that signs auto-issued gateway certificates."""

    kind: str
    name: str

    @classmethod
    def parse(cls, text: str) -> IssuerRef:
        """``KIND/NAME`` as ``--tls-issuer`` takes it. The name must be a Kubernetes object name:
        ``ClusterIssuer/a/b`` or a name with a space was accepted, and every Certificate the operator
        applied then named an issuer that cannot exist, each object ``CertificatePending`` for good."""
        kind, _, name = text.partition("/")
        if kind not in _ISSUER_KINDS or not name:
            raise TlsIssuerError(f"--tls-issuer {text!r}: expected Issuer/NAME or ClusterIssuer/NAME")
        if len(name) > 253 or not _OBJECT_NAME.fullmatch(name):
            raise TlsIssuerError(
                f"--tls-issuer {text!r}: NAME {name!r} is not a Kubernetes object name (lower-case "
                "letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 "
                "characters); expected Issuer/NAME or ClusterIssuer/NAME"
            )
        return cls(kind, name)


AcmClientFactory = Callable[[], Any]


def default_acm_client() -> Any:
    """An ACM client from the pod's own credentials (IRSA / EKS Pod Identity) and region."""
    # deferred: start-up cost: boto3 loads only when an object asks for an auto-issued certificate
    import boto3

    return boto3.client("acm")


def wants_auto_issue(spec: Mapping[str, Any]) -> bool:
    """``tls: {}`` or an empty ``acmArn``; an omitted ``tls`` means no TLS at all."""
    tls = spec.get("tls")
    return isinstance(tls, Mapping) and not tls.get("acmArn")


def secret_name(service_name: str) -> str:
    return f"{service_name}-tls"


def foreign_secret(secret: Mapping[str, Any] | None, certificate_name: str) -> bool:
    """Whether ``secret`` exists and is not cert-manager's for the Certificate ``certificate_name``
    (its ``cert-manager.io/certificate-name`` annotation names another, or none).

    Such a Secret is someone else's: importing it would put their key pair on this object's load
    balancer (the operator reads Secrets the object's author may not), and applying the Certificate
    would make cert-manager overwrite it."""
    if secret is None:
        return False
    annotations = (secret.get("metadata") or {}).get("annotations") or {}
    return annotations.get(CERTIFICATE_NAME_ANNOTATION) != certificate_name


def issued_secret(secret: Mapping[str, Any] | None, certificate_name: str, labels: Mapping[str, str]) -> bool:
    """Whether ``secret`` is the one cert-manager wrote for the operator's Certificate
    ``certificate_name``: annotated with that name and carrying every ownership label in ``labels``
    (the Certificate's ``secretTemplate``). Only such a Secret is deleted with the Certificate: one
    without the labels (made by hand, or by someone's Certificate of that name) is left alone."""
    if secret is None:
        return False
    meta = secret.get("metadata") or {}
    if (meta.get("annotations") or {}).get(CERTIFICATE_NAME_ANNOTATION) != certificate_name:
        return False
    have = meta.get("labels") or {}
    return bool(labels) and all(have.get(key) == value for key, value in labels.items())


def issuance_failure(live: Mapping[str, Any] | None) -> str | None:
    """cert-manager's message when its last attempt to issue the Certificate ``live`` (as read from the
    API) failed: condition ``Issuing`` False (reason ``Failed`` or ``Denied``; on success cert-manager
    removes the condition), for the Certificate's current generation. ``None`` otherwise: still
    issuing, or the condition is about a spec since changed (cert-manager tries that one anew)."""
    if not live:
        return None
    generation = (live.get("metadata") or {}).get("generation")
    for found in (live.get("status") or {}).get("conditions") or ():
        if not isinstance(found, Mapping) or found.get("type") != "Issuing" or found.get("status") != "False":
            continue
        observed = found.get("observedGeneration")
        if observed is not None and generation is not None and observed != generation:
            return None
        return str(found.get("message") or found.get("reason") or "issuance failed")
    return None


def _condition(live: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any] | None:
    for found in ((live or {}).get("status") or {}).get("conditions") or ():
        if isinstance(found, Mapping) and found.get("type") == kind:
            return found
    return None


def renewal_problem(live: Mapping[str, Any] | None, issued: IssuedCertificate, now: datetime) -> str | None:
    """Why the certificate being served (``issued``, imported into ACM) is not being replaced as it
    should be, or ``None``.

    A failed renewal left the object saying ``Programmed`` until the load balancer served an expired
    certificate: the Secret still held the old one, so :func:`issuance_failure` was never consulted.
    Reported: cert-manager's last attempt failed for the Certificate's current generation (``Issuing``
    False); or the served certificate is past two thirds of its lifetime (cert-manager's default
    renewal point) while the Certificate is not ``Ready``; or it has expired.

    The renewal point is cert-manager's (:func:`igw.config.certificate_renewal.renewal_time`): its
    ``status.renewalTime``, else ``spec.renewBefore`` / ``renewBeforePercentage``, else two thirds of
    the lifetime. Two thirds alone missed a Certificate renewed earlier (``renewBefore: 1440h`` on a
    90-day certificate renews at day 30): not Ready and stuck for a month before it was reported."""
    expiry = issued.not_after
    until = ""
    if expiry is not None:
        verb = "expired" if now >= expiry else "expires"
        until = f"; the certificate in ACM {verb} at {rfc3339(expiry)}"
    failure = issuance_failure(live)
    if failure is not None:
        return f"cert-manager failed to renew the certificate: {failure}{until}"
    if expiry is None:
        return None
    if now >= expiry:
        return f"cert-manager has not renewed the certificate{until}"
    ready = _condition(live, "Ready")
    renewal = renewal_time(live, issued.not_before, expiry)
    overdue = renewal is not None and now >= renewal
    if overdue and ready is not None and ready.get("status") == "False":
        why = str(ready.get("message") or ready.get("reason") or "not Ready")
        return f"cert-manager has not renewed the certificate (Certificate not Ready: {why}){until}"
    return None


def without_key_material(text: str) -> str:
    """``text`` (an error from ACM or from parsing a Secret) with every PEM block, every long base64
    or hex run and every other credential replaced by ``[REDACTED]``
    (:func:`igw.redaction.redact_quoting_keys`, the one set of masking rules): it goes into the
    object's status and an Event, which anyone who may read the object sees, while the Secret it came
    from holds a private key they may not read. An AWS validation error can quote the request's value
    (``Value '...' at 'privateKey' failed to satisfy constraint``; a blob travels base64-encoded), and
    a key pasted into ``tls.crt`` is PEM."""
    return redact_quoting_keys(text)


def rfc3339(moment: datetime) -> str:
    """``moment`` (UTC) as RFC 3339, as the status and messages write times."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def expired(issued: IssuedCertificate, now: datetime) -> bool:
    """Whether the certificate ``issued`` (the one imported into ACM and served) is past its notAfter.

    Every client that verifies the certificate then fails its TLS handshake: the object said
    ``Programmed`` (``Ready`` True in ``kubectl get igwc``) with the expiry only deep in a message."""
    return issued.not_after is not None and now >= issued.not_after


def issuer_problem(
    issuer: IssuerRef,
    found: Mapping[str, Any] | None,
    namespace: str,
    certificate_name: str,
    *,
    served_until: datetime | None = None,
) -> tuple[str, str] | None:
    """``(reason, message)`` when the issuer a waiting Certificate names cannot sign it: ``found``
    (the issuer as read from the API, ``None`` when it does not exist) is missing
    (``IssuerNotFound``) or not Ready (``IssuerNotReady``, with its own Ready message). ``None`` when
    it is Ready: cert-manager is on it.

    cert-manager waits for a missing or unready issuer without failing the Certificate, so the
    object said ``CertificatePending`` for good with the cause nowhere on it (the default chart names
    ``ClusterIssuer/igw-selfsigned`` and creates it only with ``operator.selfSignedClusterIssuer``).

    ``served_until``: the notAfter of the certificate already issued and served, when there is one:
    the issuer went away or NotReady after issuance, so the next renewal will fail (the message says
    so, and until when the current certificate lasts) rather than that the Certificate waits."""
    where = f" in namespace {namespace}" if issuer.kind == "Issuer" else ""
    waiting = f"Certificate {namespace}/{certificate_name} waits for it (cert-manager does not fail it)"
    if served_until is not None:
        waiting = (
            f"cert-manager cannot renew Certificate {namespace}/{certificate_name} until it is; the "
            f"certificate served expires at {rfc3339(served_until)}"
        )
    if found is None:
        return (
            "IssuerNotFound",
            f"{issuer.kind} {issuer.name} does not exist{where}: {waiting}; create the {issuer.kind}, "
            "or name another with the operator's --tls-issuer (chart "
            "operator.tlsIssuer; operator.selfSignedClusterIssuer: true creates "
            "ClusterIssuer/igw-selfsigned)",
        )
    ready = _condition(found, "Ready")
    if ready is not None and ready.get("status") == "True":
        return None
    if ready is None:
        why = "it has no Ready condition yet: cert-manager has not processed it (is cert-manager running?)"
    else:
        why = str(ready.get("message") or ready.get("reason") or "not Ready")
    return ("IssuerNotReady", f"{issuer.kind} {issuer.name}{where} is not Ready: {why}; {waiting}")


def dns_names(service_name: str, namespace: str, hostnames: Sequence[str] = ()) -> list[str]:
    """The names the certificate covers: the client-facing ``hostnames`` (``spec.extensions.dataPlane``)
    first, then the Service's in-cluster names, shortest first; the first is the common name."""
    in_cluster = [
        service_name,
        f"{service_name}.{namespace}",
        f"{service_name}.{namespace}.svc",
        f"{service_name}.{namespace}.svc.cluster.local",
    ]
    return [*dict.fromkeys([*hostnames, *in_cluster])]


def client_hostnames(spec: Mapping[str, Any]) -> list[str]:
    """``spec.extensions.dataPlane.hostnames``: the names clients use (schema-validated)."""
    extension = (spec.get("extensions") or {}).get("dataPlane") or {}
    return [str(name) for name in extension.get("hostnames") or ()]


def certificate(
    service_name: str,
    namespace: str,
    issuer: IssuerRef,
    metadata: Mapping[str, Any],
    hostnames: Sequence[str] = (),
    secret_labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The cert-manager Certificate for one gateway Service (``metadata`` carries the owner reference);
    ``secret_labels`` go on the Secret cert-manager writes (``secretTemplate``), so the operator can
    tell that Secret is its own when it deletes it (:func:`issued_secret`)."""
    names = dns_names(service_name, namespace, hostnames)
    return {
        "apiVersion": CERT_MANAGER_API,
        "kind": CERTIFICATE_KIND,
        "metadata": dict(metadata),
        "spec": {
            "secretName": secret_name(service_name),
            # X.509 limits a common name to 64 characters; the SANs carry every name either way.
            "commonName": names[0] if len(names[0]) <= 64 else service_name,
            "dnsNames": names,
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
            "usages": ["server auth", "digital signature", "key encipherment"],
            "issuerRef": {"group": "cert-manager.io", "kind": issuer.kind, "name": issuer.name},
            **({"secretTemplate": {"labels": dict(secret_labels)}} if secret_labels else {}),
        },
    }


@dataclass(frozen=True, slots=True)
class IssuedCertificate:
    """The PEM parts of a cert-manager Secret: the leaf, the rest of the chain, the private key."""

    leaf: str
    chain: str
    private_key: str
    issued_at: str
    """The leaf's notBefore, RFC 3339."""
    dns_names: tuple[str, ...] = ()
    """The DNS names of the leaf's subjectAltName: what it covers (``status.tls.dnsNames``), which
    differs from what the Certificate asks while cert-manager has not reissued it for new names."""
    not_before: datetime | None = None
    not_after: datetime | None = None
    """The leaf's validity (UTC): a renewal that does not come is reported (:func:`renewal_problem`)."""

    @classmethod
    def from_secret(cls, secret: Mapping[str, Any] | None) -> IssuedCertificate | None:
        """``None`` until cert-manager has written both ``tls.crt`` and ``tls.key``."""
        data = (secret or {}).get("data") or {}
        if not data.get("tls.crt") or not data.get("tls.key"):
            return None
        certs = base64.b64decode(data["tls.crt"]).decode()
        key = base64.b64decode(data["tls.key"]).decode()
        blocks = _certificate_blocks(certs)
        if not blocks:
            return None
        try:
            leaf = x509.load_pem_x509_certificate(blocks[0].encode() + b"\n")
        except ValueError as exc:
            raise ValueError(f"tls.crt does not start with a PEM certificate ({exc})") from exc
        return cls(
            leaf=blocks[0] + "\n",
            chain="\n".join(blocks[1:]) + ("\n" if blocks[1:] else ""),
            private_key=key,
            issued_at=rfc3339(leaf.not_valid_before_utc),
            dns_names=_covered_names(leaf),
            not_before=leaf.not_valid_before_utc,
            not_after=leaf.not_valid_after_utc,
        )


def _certificate_blocks(certs: str) -> list[str]:
    """The PEM ``CERTIFICATE`` blocks of ``certs`` (a Secret's ``tls.crt``), in order: the leaf, then
    the chain ACM is sent as ``CertificateChain``.

    Any other block is refused (``ValueError``, whose message names the block's label, never its
    content). Some tools write the certificate and its private key into one combined PEM; the
    blocks were cut at each ``END CERTIFICATE`` line until session s43, so the key went to ACM inside
    ``CertificateChain`` (and the import failed with ACM's "not PEM-encoded or is not valid", which
    did not say why). Text outside the blocks (``openssl pkcs12``'s ``Bag Attributes``) is left out."""
    labels = [match.group(1) for match in _PEM_BEGIN.finditer(certs)]
    others = [label for label in labels if label != "CERTIFICATE"]
    if any("PRIVATE KEY" in label for label in others):
        raise ValueError(
            "tls.crt holds a private key besides its certificates (a combined PEM): only CERTIFICATE "
            "blocks may be in tls.crt, the key belongs in tls.key alone; nothing was sent to ACM"
        )
    if others:
        raise ValueError(
            f"tls.crt holds a {others[0][:40]!r} PEM block: only CERTIFICATE blocks (the leaf, then its "
            "chain) may be in tls.crt; nothing was sent to ACM"
        )
    blocks = [match.group(0) for match in _PEM_CERTIFICATE.finditer(certs)]
    if len(blocks) != len(labels) or (certs.strip() and not blocks):
        raise ValueError(
            "tls.crt does not start with a PEM certificate (a CERTIFICATE block without its END line, "
            "or no BEGIN CERTIFICATE line at all)"
        )
    return blocks


def _covered_names(leaf: x509.Certificate) -> tuple[str, ...]:
    """The DNS names ``leaf``'s subjectAltName lists (none without the extension)."""
    try:
        names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    return tuple(names.get_values_for_type(x509.DNSName))


def _compact(pem: str) -> str:
    return "".join(pem.split())


def _same_pem(left: str, right: str) -> bool:
    return _compact(left) == _compact(right)


VERIFY_INTERVAL_S: Final = 300.0
"""Seconds an import :meth:`AcmImporter.ensure_imported` found holding a config's certificate with its
tags is taken to still hold them without asking ACM again, while the Secret's certificate is the same.
Every resync pass (5 s) of every ``tls: {}`` object asked ACM twice (GetCertificate and
ListTagsForCertificate), calls the account and region share, with each cluster's operator, under
ACM's request-rate quotas; a change made to the import outside the operator (deleted or retagged by
hand) is still seen within this time."""

LISTED_KEY_TYPES: Final = ("EC_prime256v1", "EC_secp384r1", "RSA_2048", "RSA_3072", "RSA_4096")
"""Key types searched for an owned certificate (ACM lists only RSA_2048 unless asked)."""


@dataclass(frozen=True, slots=True)
class OwnedImport:
    """An ACM import the operator's tags attribute to one InferenceGatewayConfig of this cluster."""

    arn: str
    uid: str
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class _KnownTags:
    """What the sweep needs of one import's tags: the owner uid (``""``: none), namespace, name and
    cluster (``""``: an import made before :data:`CLUSTER_TAG` existed)."""

    uid: str
    namespace: str
    name: str
    cluster: str

    @property
    def settled(self) -> bool:
        """Whether these can no longer change: an import without the uid tag is not the operator's and
        never gets its tags; one with both tags keeps them (the uid is fixed at import). Only an
        owned import without the cluster tag still gets it (the next pass of its config adds it)."""
        return not self.uid or bool(self.cluster)


@dataclass(slots=True)
class TaggedImports:
    """One listing of ACM imports by the operator's tags (:meth:`AcmImporter.tagged_imports`)."""

    owned: list[OwnedImport]
    """Tagged with this cluster's :data:`CLUSTER_TAG` and an owner uid."""
    legacy: list[OwnedImport]
    """Tagged with an owner uid but no cluster: imported before the cluster tag existed (or by an
    operator that could not read its cluster's identity). ACM is shared by every cluster of the
    account and region, so nothing tells whose they are: the sweep never deletes them."""
    tag_reads: int = 0
    """ListTagsForCertificate calls this listing made (the others were remembered)."""


@dataclass(frozen=True, slots=True)
class _Verified:
    """An import last found holding a config's certificate with its tags: which, what, and when."""

    arn: str
    fingerprint: str
    """Digest of the leaf and the tags it was found with."""
    at: float


class AcmImporter:
    """Imports cert-manager certificates into ACM and removes the ones it imported (sync; run in a thread)."""

    def __init__(
        self,
        client_factory: AcmClientFactory = default_acm_client,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client_factory = client_factory
        self._client: Any = None
        self._client_lock = threading.Lock()
        self._clock = clock
        self._verified: dict[str, _Verified] = {}
        """Owner uid: the import :meth:`ensure_imported` last found (or made) holding its certificate,
        so the passes in between ask ACM nothing (:data:`VERIFY_INTERVAL_S`). One entry per object
        with an import; dropped when the import is deleted."""
        self._known: dict[str, _KnownTags] = {}
        """Settled tags of each import the last listing showed (:attr:`_KnownTags.settled`): the
        sweep reads an import's tags once, not every sweep (one call per import of the whole account
        and region every 10 minutes). Pruned to the ARNs of each listing, so it never holds more
        entries than ACM lists."""
        self._known_lock = threading.Lock()

    def _acm(self) -> Any:
        # Passes for several objects run in worker threads at once; build the client only once.
        with self._client_lock:
            if self._client is None:
                self._client = self._client_factory()
            return self._client

    def _tags_of(self, arn: str) -> dict[str, str]:
        tags = self._acm().list_tags_for_certificate(CertificateArn=arn).get("Tags") or []
        return {str(t.get("Key")): str(t.get("Value") or "") for t in tags}

    def _owner_uid(self, arn: str) -> str | None:
        return self._tags_of(arn).get(UID_TAG)

    def ensure_imported(
        self,
        issued: IssuedCertificate,
        *,
        arn: str | None,
        uid: str,
        name: str,
        namespace: str = "",
        cluster: str = "",
    ) -> str:
        """The ARN holding ``issued``: unchanged when ACM already has it, re-imported under ``arn``
        when the Secret's certificate changed, a fresh import when there is no (owned) ARN yet.
        ``namespace`` and ``cluster`` (:data:`CLUSTER_TAG`) are tagged too when known, and added to
        an owned import made before they were (so the orphan sweep can find it). While the leaf and
        tags are those this importer last found (or put) under ``arn`` less than
        :data:`VERIFY_INTERVAL_S` ago, ACM is not asked again."""
        tags = self._tags(uid, name, namespace, cluster)
        fingerprint = hashlib.sha256(repr((_compact(issued.leaf), tags)).encode()).hexdigest()
        with self._known_lock:
            verified = self._verified.get(uid)
        if (
            verified is not None
            and arn == verified.arn
            and verified.fingerprint == fingerprint
            and self._clock() - verified.at < VERIFY_INTERVAL_S
        ):
            return arn
        found = self._ensure_imported(issued, arn=arn, uid=uid, tags=tags)
        with self._known_lock:
            self._verified[uid] = _Verified(found, fingerprint, self._clock())
        return found

    def _ensure_imported(
        self, issued: IssuedCertificate, *, arn: str | None, uid: str, tags: list[dict[str, str]]
    ) -> str:
        acm = self._acm()
        # No ARN recorded (first pass, or a status write lost after an import): reuse the certificate
        # this object already owns, so a retried pass never imports a second one.
        arn = arn or self._find_owned(uid)
        if arn:
            try:
                current = acm.get_certificate(CertificateArn=arn).get("Certificate") or ""
                have = self._tags_of(arn)
            except acm.exceptions.ResourceNotFoundException:
                current, have = "", {}
            owned = have.get(UID_TAG) == uid
            if owned and _same_pem(current, issued.leaf):
                if any(have.get(tag["Key"]) != tag["Value"] for tag in tags):
                    acm.add_tags_to_certificate(CertificateArn=arn, Tags=tags)
                    self._forget_tags(arn)
                return arn
            if owned:
                acm.import_certificate(CertificateArn=arn, **self._parts(issued))
                # A re-import takes no tags; put the owner tags back in case the import dropped them.
                acm.add_tags_to_certificate(CertificateArn=arn, Tags=tags)
                self._forget_tags(arn)
                return arn
        created = acm.import_certificate(**self._parts(issued), Tags=tags)
        return str(created["CertificateArn"])

    def owned_imports(self, cluster: str) -> list[OwnedImport]:
        """Every imported certificate tagged as this operator's for the cluster ``cluster`` (its
        :data:`CLUSTER_TAG` value), with the object its tags name."""
        return self.tagged_imports(cluster).owned if cluster else []

    def tagged_imports(self, cluster: str) -> TaggedImports:
        """The imports tagged as this operator's for ``cluster``, and those tagged before the cluster
        tag existed (:attr:`TaggedImports.legacy`): one ACM listing, and one tag read per import
        whose tags are not remembered from an earlier listing."""
        found = TaggedImports(owned=[], legacy=[])
        listed: set[str] = set()
        pages = (
            self._acm()
            .get_paginator("list_certificates")
            .paginate(Includes={"keyTypes": list(LISTED_KEY_TYPES)})
        )
        for page in pages:
            for summary in page.get("CertificateSummaryList") or []:
                if summary.get("Type", "IMPORTED") != "IMPORTED":
                    continue
                arn = str(summary["CertificateArn"])
                listed.add(arn)
                with self._known_lock:
                    known = self._known.get(arn)
                if known is None:
                    tags = self._tags_of(arn)
                    found.tag_reads += 1
                    known = _KnownTags(
                        tags.get(UID_TAG, ""),
                        tags.get(NAMESPACE_TAG, ""),
                        tags.get(NAME_TAG, ""),
                        tags.get(CLUSTER_TAG, ""),
                    )
                    if known.settled:
                        with self._known_lock:
                            self._known[arn] = known
                if not known.uid:
                    continue
                entry = OwnedImport(arn, known.uid, known.namespace, known.name)
                if not known.cluster:
                    found.legacy.append(entry)
                elif cluster and known.cluster == cluster:
                    found.owned.append(entry)
        with self._known_lock:  # what ACM no longer lists is forgotten: bounded by the listing
            for arn in [arn for arn in self._known if arn not in listed]:
                del self._known[arn]
        return found

    def _forget_tags(self, arn: str) -> None:
        with self._known_lock:
            self._known.pop(arn, None)

    def _find_owned(self, uid: str) -> str | None:
        """The imported certificate whose uid tag names this object, if any (one ACM listing)."""
        acm = self._acm()
        pages = acm.get_paginator("list_certificates").paginate(Includes={"keyTypes": list(LISTED_KEY_TYPES)})
        for page in pages:
            for summary in page.get("CertificateSummaryList") or []:
                if summary.get("Type", "IMPORTED") != "IMPORTED":
                    continue
                arn = str(summary["CertificateArn"])
                with self._known_lock:
                    known = self._known.get(arn)
                if known is not None and known.uid != uid:  # settled: another owner's for good
                    continue
                if self._owner_uid(arn) == uid:
                    return arn
        return None

    @staticmethod
    def _tags(uid: str, name: str, namespace: str = "", cluster: str = "") -> list[dict[str, str]]:
        tags = [{"Key": UID_TAG, "Value": uid}, {"Key": NAME_TAG, "Value": name}]
        tags += [{"Key": NAMESPACE_TAG, "Value": namespace}] if namespace else []
        return tags + ([{"Key": CLUSTER_TAG, "Value": cluster}] if cluster else [])

    @staticmethod
    def _parts(issued: IssuedCertificate) -> dict[str, bytes]:
        parts = {"Certificate": issued.leaf.encode(), "PrivateKey": issued.private_key.encode()}
        if issued.chain:
            parts["CertificateChain"] = issued.chain.encode()
        return parts

    def delete_owned(self, arn: str, *, uid: str, cluster: str | None = None) -> bool:
        """Delete ``arn`` when its uid tag names the deleted object (and, given ``cluster``, its
        :data:`CLUSTER_TAG` is that one), read afresh: the sweep's remembered tags never decide a
        deletion alone. ``True`` when deleted."""
        with self._known_lock:  # asked again at the next import, whatever ACM answers now
            self._verified.pop(uid, None)
        acm = self._acm()
        try:
            tags = self._tags_of(arn)
            if tags.get(UID_TAG) != uid or (cluster is not None and tags.get(CLUSTER_TAG) != cluster):
                self._forget_tags(arn)  # retagged by hand since: read again at the next listing
                return False
            acm.delete_certificate(CertificateArn=arn)
        except acm.exceptions.ResourceNotFoundException:
            self._forget_tags(arn)
            return False
        self._forget_tags(arn)
        return True


@dataclass(frozen=True, slots=True)
class AutoTlsSettings:
    """How the operator auto-issues certificates (``--tls-issuer``, the ACM client), or whether at all."""

    issuer: IssuerRef = IssuerRef("ClusterIssuer", "igw-selfsigned")
    acm_client_factory: AcmClientFactory = default_acm_client
    enabled: bool = True
    """``False`` (``--no-auto-tls``): no Certificate or Secret is ever read, written or deleted (the
    operator's RBAC grants none); ``tls: {}`` is reported ``AutoTlsDisabled``."""
