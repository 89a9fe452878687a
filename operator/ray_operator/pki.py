"""Small certificate authority: CA, serving and client certificates as PEM bytes.

Used by the local control plane (API server, admin client) and by the admission webhooks'
self-managed TLS. Keys are ECDSA P-256: fast to generate and accepted by every Kubernetes
component. Nothing here touches the network or the filesystem.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Clocks of the processes that verify our certificates may lag ours a little.
CLOCK_SKEW_ALLOWANCE = datetime.timedelta(minutes=5)


@dataclasses.dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM-encoded."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def not_after(self) -> datetime.datetime:
        return self.certificate.not_valid_after_utc


def new_private_key_pem() -> bytes:
    """A fresh ECDSA P-256 private key in PKCS#8 PEM."""
    return _key_to_pem(ec.generate_private_key(ec.SECP256R1()))


def public_key_pem(private_key_pem: bytes) -> bytes:
    """The public half of a PEM private key, as PEM (e.g. for service-account verification)."""
    key = serialization.load_pem_private_key(private_key_pem, password=None)
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def create_ca(common_name: str, *, valid_for: datetime.timedelta) -> KeyPair:
    """A self-signed certificate authority."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW_ALLOWANCE)
        .not_valid_after(now + valid_for)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_to_pem(key))


def issue_certificate(
    ca: KeyPair,
    common_name: str,
    *,
    valid_for: datetime.timedelta,
    organizations: Sequence[str] = (),
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    server: bool = False,
    client: bool = False,
) -> KeyPair:
    """A leaf certificate signed by ``ca``, for serving (with SANs) and/or client auth."""
    ca_cert = ca.certificate
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key must be an ECDSA key")
    key = ec.generate_private_key(ec.SECP256R1())
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    attributes += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [ExtendedKeyUsageOID.CLIENT_AUTH] * client
    now = _now()
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attributes))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW_ALLOWANCE)
        .not_valid_after(now + valid_for)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    alternative_names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    alternative_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    if alternative_names:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(alternative_names), critical=False
        )
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_to_pem(key))


def _key_to_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
