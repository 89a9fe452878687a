"""Where the webhook's serving certificate comes from: a Secret we manage, or a directory.

`SelfManagedCertificates` (the default) keeps a CA and a serving certificate in one Secret of the
operator's namespace (`kubernetes.io/tls`: `tls.crt`, `tls.key`, plus `ca.crt` — the bundle of
CAs to trust — and `ca.key`). Every replica runs it: the first to find no Secret creates one
(create-if-absent; the losers of that race read the winner's back), and whoever finds the serving
certificate past 2/3 of its validity (or its names changed) replaces it with a compare-and-swap
on the Secret's resourceVersion, so all replicas converge on one certificate. The CA lives ten
times longer and is rotated the same way; the retired CA stays in the bundle until it expires,
so a replica still serving a certificate signed by it stays trusted meanwhile.

`DirectoryCertificates` reads `tls.crt`/`tls.key` (and `ca.crt` if present) from a directory —
cert-manager's Secret mounted into the Pod — and notices when the kubelet swaps in renewed files.

Both answer `load()` with the current `ServingMaterial`; the caller (component.py) publishes its
CA bundle and loads it into the server. Private keys never reach a log line or an exception.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from ray_operator.pki import CLOCK_SKEW_ALLOWANCE, KeyPair, create_ca, issue_certificate
from ray_operator.runtime.client import KubeClient, Object
from ray_operator.runtime.errors import AlreadyExists, Conflict, NotFound
from ray_operator.spec.kinds import Kind
from ray_operator.spec.secret_values import secret_values

logger = logging.getLogger(__name__)

SECRET = Kind("", "v1", "secrets", "Secret")
TLS_CERT_KEY = "tls.crt"
TLS_KEY_KEY = "tls.key"
CA_CERT_KEY = "ca.crt"
CA_KEY_KEY = "ca.key"
RENEW_AT_FRACTION = 2 / 3


@dataclasses.dataclass(frozen=True)
class ServingMaterial:
    """What the server presents and what the API server must trust."""

    serving: KeyPair
    """The serving certificate and its key."""
    ca_bundle: bytes | None
    """PEM CA certificates for the webhook configurations' caBundle (None: not ours to set)."""
    renew_at: datetime.datetime | None = None
    """When to look again at the latest (None: poll at the usual interval)."""


class CertificateSource(Protocol):
    """Something that knows the current serving material."""

    async def load(self) -> ServingMaterial:
        """The serving material as it should be served now (renewing it first if due)."""
        ...


@dataclasses.dataclass(frozen=True)
class CertificateBundle:
    """The content of the self-managed Secret."""

    ca: KeyPair
    """The CA that signs new serving certificates."""
    ca_bundle: bytes
    """Every CA certificate to trust: `ca` first, then retired CAs not yet expired."""
    serving: KeyPair
    """The serving certificate, signed by `ca`."""

    def secret_data(self) -> dict[str, str]:
        raw = {
            TLS_CERT_KEY: self.serving.cert_pem,
            TLS_KEY_KEY: self.serving.key_pem,
            CA_CERT_KEY: self.ca_bundle,
            CA_KEY_KEY: self.ca.key_pem,
        }
        return {key: base64.b64encode(value).decode() for key, value in raw.items()}

    @classmethod
    def from_secret(cls, secret: Object) -> CertificateBundle | None:
        """The bundle in a Secret; None when it is incomplete or unreadable (then re-issued)."""
        try:
            # Every key, not strict base64, as this reader always took them: any key that
            # does not decode means a re-issue (SecretValueError is a ValueError).
            data = secret_values(secret, strict=False)
            ca_bundle = data[CA_CERT_KEY]
            ca_certs = x509.load_pem_x509_certificates(ca_bundle)
            ca = KeyPair(ca_certs[0].public_bytes(Encoding.PEM), data[CA_KEY_KEY])
            bundle = cls(ca, ca_bundle, KeyPair(data[TLS_CERT_KEY], data[TLS_KEY_KEY]))
            bundle.serving.certificate  # noqa: B018 - parses, or raises ValueError
        except (KeyError, ValueError, TypeError, IndexError):
            return None
        return bundle


def renewal_time(pair: KeyPair) -> datetime.datetime:
    """When a certificate has lived 2/3 of its validity (skew allowance not counted)."""
    certificate = pair.certificate
    issued = certificate.not_valid_before_utc + CLOCK_SKEW_ALLOWANCE
    lifetime = certificate.not_valid_after_utc - issued
    return issued + lifetime * RENEW_AT_FRACTION


def issue_bundle(
    previous: CertificateBundle | None,
    *,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str],
    validity: datetime.timedelta,
    ca_validity: datetime.timedelta,
    now: datetime.datetime,
) -> CertificateBundle:
    """A new serving certificate, signed by the previous CA unless that is due for rotation."""
    ca = previous.ca if previous is not None else None
    retired: list[x509.Certificate] = []
    if ca is None or renewal_time(ca) <= now:
        if previous is not None:
            retired = x509.load_pem_x509_certificates(previous.ca_bundle)
        ca = create_ca("ray-operator-webhook-ca", valid_for=ca_validity)
    else:
        retired = x509.load_pem_x509_certificates(previous.ca_bundle)[1:] if previous else []
    still_valid = [c for c in retired if c.not_valid_after_utc > now]
    ca_bundle = ca.cert_pem + b"".join(c.public_bytes(Encoding.PEM) for c in still_valid)
    serving = issue_certificate(
        ca,
        # Clients check the SANs; a CN holding the DNS name could exceed X.509's 64 characters.
        "ray-operator-webhook",
        valid_for=validity,
        dns_names=dns_names,
        ip_addresses=ip_addresses,
        server=True,
    )
    return CertificateBundle(ca, ca_bundle, serving)


def needs_renewal(
    bundle: CertificateBundle,
    *,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str],
    now: datetime.datetime,
) -> bool:
    """Whether the serving certificate or the CA is due, or the names it must carry changed."""
    if renewal_time(bundle.serving) <= now or renewal_time(bundle.ca) <= now:
        return True
    return _subject_names(bundle.serving) != (set(dns_names), set(ip_addresses))


def _subject_names(pair: KeyPair) -> tuple[set[str], set[str]]:
    try:
        names = pair.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return set(), set()
    dns = set(names.value.get_values_for_type(x509.DNSName))
    ips = {str(ip) for ip in names.value.get_values_for_type(x509.IPAddress)}
    return dns, ips


class SelfManagedCertificates:
    """A CA and serving certificate kept in a Secret, shared by every replica."""

    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        secret_name: str,
        dns_names: Sequence[str],
        ip_addresses: Sequence[str] = (),
        validity: datetime.timedelta,
        ca_validity: datetime.timedelta,
    ) -> None:
        self._client = client
        self._namespace = namespace
        self._secret_name = secret_name
        self._dns_names = tuple(dns_names)
        self._ip_addresses = tuple(ip_addresses)
        self._validity = validity
        self._ca_validity = ca_validity

    async def load(self) -> ServingMaterial:
        """Read the Secret (creating or renewing it when needed) and return what it holds."""
        bundle = await self._read_or_create()
        for _ in range(3):  # a lost race re-reads the winner's; three rounds always settle
            now = _now()
            if not needs_renewal(
                bundle, dns_names=self._dns_names, ip_addresses=self._ip_addresses, now=now
            ):
                break
            bundle = await self._renew(bundle)
        renew_at = min(renewal_time(bundle.serving), renewal_time(bundle.ca))
        return ServingMaterial(bundle.serving, bundle.ca_bundle, renew_at)

    async def _read_or_create(self) -> CertificateBundle:
        try:
            secret = await self._client.get(SECRET, self._secret_name, namespace=self._namespace)
        except NotFound:
            bundle = self._issue(None)
            try:
                await self._client.create(SECRET, self._secret(bundle), namespace=self._namespace)
            except AlreadyExists:
                return await self._read_or_create()  # another replica won: use theirs
            logger.info(
                "created the webhook certificate Secret %s/%s", self._namespace, self._secret_name
            )
            return bundle
        return CertificateBundle.from_secret(secret) or await self._replace(secret, None)

    async def _renew(self, bundle: CertificateBundle) -> CertificateBundle:
        secret = await self._client.get(SECRET, self._secret_name, namespace=self._namespace)
        current = CertificateBundle.from_secret(secret)
        if current is not None and current.serving.cert_pem != bundle.serving.cert_pem:
            return current  # someone renewed it since we read it
        return await self._replace(secret, current)

    async def _replace(
        self, secret: Object, current: CertificateBundle | None
    ) -> CertificateBundle:
        bundle = self._issue(current)
        body = self._secret(bundle)
        body["metadata"]["resourceVersion"] = secret["metadata"]["resourceVersion"]
        try:
            await self._client.replace(SECRET, body)
        except Conflict:
            secret = await self._client.get(SECRET, self._secret_name, namespace=self._namespace)
            return CertificateBundle.from_secret(secret) or await self._replace(secret, None)
        logger.info(
            "renewed the webhook serving certificate (valid until %s)",
            bundle.serving.not_after.isoformat(),
        )
        return bundle

    def _issue(self, previous: CertificateBundle | None) -> CertificateBundle:
        return issue_bundle(
            previous,
            dns_names=self._dns_names,
            ip_addresses=self._ip_addresses,
            validity=self._validity,
            ca_validity=self._ca_validity,
            now=_now(),
        )

    def _secret(self, bundle: CertificateBundle) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {
                "name": self._secret_name,
                "namespace": self._namespace,
                "labels": {
                    "app.kubernetes.io/name": "ray-operator",
                    "app.kubernetes.io/component": "webhook",
                },
            },
            "data": bundle.secret_data(),
        }


class DirectoryCertificates:
    """`tls.crt`, `tls.key` and optionally `ca.crt` from a directory (cert-manager's Secret)."""

    def __init__(self, directory: Path, *, publish_ca: bool) -> None:
        self._directory = directory
        self._publish_ca = publish_ca

    async def load(self) -> ServingMaterial:
        """The files as they are now; `FileNotFoundError` until they exist."""
        # Tiny local files: reading them on the loop costs less than a thread hop.
        cert_pem = (self._directory / TLS_CERT_KEY).read_bytes()
        key_pem = (self._directory / TLS_KEY_KEY).read_bytes()
        ca_path = self._directory / CA_CERT_KEY
        ca_bundle = ca_path.read_bytes() if self._publish_ca and ca_path.exists() else None
        return ServingMaterial(KeyPair(cert_pem, key_pem), ca_bundle)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
