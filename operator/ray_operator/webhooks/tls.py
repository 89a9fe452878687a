"""The webhook server's TLS: one live `ssl.SSLContext` whose certificate is replaced in place.

OpenSSL copies the certificate and key from the context into each connection when the connection
is created, so `load_cert_chain` on the context the server already listens with changes what
every *new* handshake presents, while established connections finish with the old one: rotation
needs no restart and drops no request. `load_cert_chain` only reads files, so a new key pair is
written to a private temporary directory, loaded, and removed at once.
"""

from __future__ import annotations

import datetime
import os
import ssl
import tempfile
from pathlib import Path

from cryptography import x509

from ray_operator.pki import KeyPair


class ServingCertificate:
    """The server-side SSLContext and what it currently serves."""

    def __init__(self) -> None:
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._cert_pem: bytes | None = None

    @property
    def loaded(self) -> bool:
        """Whether a certificate was loaded (a server without one fails every handshake)."""
        return self._cert_pem is not None

    @property
    def cert_pem(self) -> bytes | None:
        """The certificate (chain) being served, PEM."""
        return self._cert_pem

    @property
    def serial_number(self) -> int | None:
        if self._cert_pem is None:
            return None
        return x509.load_pem_x509_certificate(self._cert_pem).serial_number

    @property
    def not_after(self) -> datetime.datetime | None:
        if self._cert_pem is None:
            return None
        return x509.load_pem_x509_certificate(self._cert_pem).not_valid_after_utc

    def load(self, pair: KeyPair) -> None:
        """Serve `pair` from the next handshake on; `ssl.SSLError` if cert and key mismatch."""
        with tempfile.TemporaryDirectory(prefix="ray-operator-tls-") as directory:
            cert_path, key_path = Path(directory, "tls.crt"), Path(directory, "tls.key")
            _write_private(cert_path, pair.cert_pem)
            _write_private(key_path, pair.key_pem)
            self.load_files(cert_path, key_path)

    def load_files(self, cert_path: Path, key_path: Path) -> None:
        """Serve the PEM files at these paths from the next handshake on."""
        self.context.load_cert_chain(certfile=cert_path, keyfile=key_path)
        self._cert_pem = cert_path.read_bytes()


def _write_private(path: Path, data: bytes) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
