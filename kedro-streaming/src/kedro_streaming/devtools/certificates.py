"""A private certificate authority for the development broker's TLS listeners,
made once per broker data folder (``<data>/tls/``) and kept::

    ca.pem               the CA's certificate: the clients' trust store (PEM)
    truststore.p12       the same, as a PKCS12 trust store (Java's keytool)
    broker.pem           the broker's key and certificate (localhost, 127.0.0.1)
    broker.p12           the same, as a PKCS12 key store (the compose broker's)
    client.pem           a client's key and certificate, for mutual TLS (PEM)
    client.p12           the same, as a PKCS12 key store
    store-password       the password of the .p12 stores

The .pem files' keys are not encrypted: throwaway, readable by their owner only.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import subprocess
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kedro_streaming.devtools.processes import write_private

CLIENT_NAME = "kedro-streaming-client"
"""The client certificate's common name (``User:CN=...`` to the broker)."""

_DAY = datetime.timedelta(days=1)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _cert_pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


class CertificateAuthority:
    """A CA that signs server and client certificates."""

    def __init__(self, key, certificate: x509.Certificate) -> None:
        self.key, self.certificate = key, certificate

    @classmethod
    def new(cls, name: str = "kedro-streaming development CA") -> CertificateAuthority:
        key = _key()
        now = datetime.datetime.now(datetime.timezone.utc)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + 3650 * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
            .sign(key, hashes.SHA256())
        )
        return cls(key, certificate)

    @classmethod
    def load(cls, folder: Path) -> CertificateAuthority:
        key = serialization.load_pem_private_key(
            (folder / "ca-key.pem").read_bytes(), None
        )
        return cls(
            key, x509.load_pem_x509_certificate((folder / "ca.pem").read_bytes())
        )

    def issue(
        self,
        common_name: str,
        *,
        hosts: tuple[str, ...] = (),
        client: bool = False,
        valid_from: datetime.datetime | None = None,
        valid_until: datetime.datetime | None = None,
    ):
        """A new key and the certificate this CA signs for it: a server's for
        ``hosts`` (names, IP addresses), or a ``client``'s, for mutual TLS;
        valid from yesterday for a year unless told."""
        key = _key()
        now = datetime.datetime.now(datetime.timezone.utc)
        names = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(valid_from or now - _DAY)
            .not_valid_after(valid_until or now + 365 * _DAY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [
                        ExtendedKeyUsageOID.CLIENT_AUTH
                        if client
                        else ExtendedKeyUsageOID.SERVER_AUTH
                    ]
                ),
                critical=False,
            )
        )
        if names:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(names), critical=False
            )
        return key, builder.sign(self.key, hashes.SHA256())

    def key_and_chain_pem(self, key, certificate) -> bytes:
        """A PEM key store: the key, then its certificate and this CA's."""
        return _key_pem(key) + _cert_pem(certificate) + _cert_pem(self.certificate)


def ensure_tls_files(
    folder: Path, hosts: tuple[str, ...] = ("localhost", "127.0.0.1")
) -> Path:
    """Makes the CA and the broker's and a client's files in ``folder``, once;
    returns ``folder``."""
    if (folder / "client.p12").is_file():
        _broker_p12(folder)  # a folder made before broker.p12 existed
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    ca = CertificateAuthority.new()
    write_private(folder / "ca-key.pem", _key_pem(ca.key))
    (folder / "ca.pem").write_bytes(_cert_pem(ca.certificate))
    key, certificate = ca.issue("localhost", hosts=hosts)
    write_private(folder / "broker.pem", ca.key_and_chain_pem(key, certificate))
    key, certificate = ca.issue(CLIENT_NAME, client=True)
    write_private(folder / "client.pem", ca.key_and_chain_pem(key, certificate))
    password = os.urandom(12).hex()
    write_private(folder / "store-password", password.encode())
    write_private(
        folder / "client.p12",
        pkcs12.serialize_key_and_certificates(
            CLIENT_NAME.encode(),
            key,
            certificate,
            [ca.certificate],
            serialization.BestAvailableEncryption(password.encode()),
        ),
    )
    _java_trust_store(folder / "ca.pem", folder / "truststore.p12", password)
    _broker_p12(folder)
    return folder


def _broker_p12(folder: Path) -> None:
    """``broker.p12`` from ``broker.pem``, once: Kafka's Docker image takes a
    key store with a password."""
    if (folder / "broker.p12").is_file():
        return
    pem = (folder / "broker.pem").read_bytes()
    key = serialization.load_pem_private_key(pem, None)
    certificate, *chain = x509.load_pem_x509_certificates(pem)
    password = (folder / "store-password").read_bytes()
    write_private(
        folder / "broker.p12",
        pkcs12.serialize_key_and_certificates(
            b"broker",
            key,
            certificate,
            chain,
            serialization.BestAvailableEncryption(password),
        ),
    )


def _java_trust_store(ca: Path, store: Path, password: str) -> None:
    """A PKCS12 trust store Java reads (keytool marks its CA trusted)."""
    from kedro_streaming._connectors.kafka.stores import keytool  # noqa: PLC0415

    store.unlink(missing_ok=True)
    subprocess.run(
        [
            keytool(),
            "-importcert",
            "-noprompt",
            "-alias",
            "ca",
            "-file",
            str(ca),
            "-keystore",
            str(store),
            "-storetype",
            "PKCS12",
            "-storepass:env",
            "KS_PASSWORD",
        ],
        env={**os.environ, "KS_PASSWORD": password},
        check=True,
        capture_output=True,
    )
