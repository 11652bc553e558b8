"""Kafka security and secrets: bad certificates, trust stores, secured
projects, and proof that no secret is shown or written.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.request import urlopen

from support.common import SASL_PASSWORD, SASL_USER


def bad_certificates(certificates, tls_dir: Path) -> dict[str, Path]:
    """PEM key stores signed by the broker's CA, each wrong in one way, for
    extra SSL listeners of the test broker: ``EXPIRED``, ``NOT_YET_VALID``
    and ``OTHER_HOST`` (a certificate for kafka.example.com only)."""
    ca = certificates.CertificateAuthority.load(tls_dir)
    now = datetime.now(timezone.utc)
    local = ("localhost", "127.0.0.1")
    issued = {
        "EXPIRED": ca.issue(
            "localhost",
            hosts=local,
            valid_from=now - timedelta(days=30),
            valid_until=now - timedelta(days=1),
        ),
        "NOT_YET_VALID": ca.issue(
            "localhost",
            hosts=local,
            valid_from=now + timedelta(days=1),
            valid_until=now + timedelta(days=30),
        ),
        "OTHER_HOST": ca.issue("kafka.example.com", hosts=("kafka.example.com",)),
    }
    stores = {}
    for name, (key, certificate) in issued.items():
        stores[name] = tls_dir / f"{name.lower()}.pem"
        stores[name].write_bytes(ca.key_and_chain_pem(key, certificate))
    return stores


def java_trust_store(tls_dir: Path) -> Path:
    """The broker CA's trust store as JKS (made from its PKCS12 one by keytool)."""
    jks = tls_dir / "truststore.jks"
    if not jks.exists():
        password = (tls_dir / "store-password").read_text()
        subprocess.run(
            [
                "keytool",
                "-importkeystore",
                "-noprompt",
                *(
                    "-srckeystore",
                    tls_dir / "truststore.p12",
                    "-srcstoretype",
                    "PKCS12",
                ),
                *("-destkeystore", jks, "-deststoretype", "JKS"),
                *("-srcstorepass:env", "KS_PASSWORD"),
                *("-deststorepass:env", "KS_PASSWORD"),
            ],
            env={**os.environ, "KS_PASSWORD": password},
            check=True,
            capture_output=True,
        )
    return jks


def secure_kafka(
    monkeypatch,
    broker,
    listener: str,
    *,
    stores: str = "PEM",
    mechanism: str = "PLAIN",
    login: tuple[str, str] = (SASL_USER, SASL_PASSWORD),
) -> str:
    """Has every command the test runs reach ``broker`` through its TLS
    ``listener`` (SSL, MTLS or SASL_SSL), set up as docs/kafka.md says: the
    variables conf/kafka/credentials.yml reads. Returns the listener's address.

    Args:
        stores: ``PEM`` (ca.pem, client.pem), ``PKCS12`` or ``JKS`` (the trust
            store; the key store is then PKCS12).
        mechanism: The SASL mechanism on SASL_SSL.
        login: Its username and password.
    """
    tls = broker.tls_dir
    password = (tls / "store-password").read_text()
    env = {"KAFKA_SECURITY_PROTOCOL": "SASL_SSL" if listener == "SASL_SSL" else "SSL"}
    if stores == "PEM":
        env |= {
            "KAFKA_SSL_TRUSTSTORE_LOCATION": str(tls / "ca.pem"),
            "KAFKA_SSL_TRUSTSTORE_TYPE": "PEM",
        }
    else:
        trust = java_trust_store(tls) if stores == "JKS" else tls / "truststore.p12"
        env |= {
            "KAFKA_SSL_TRUSTSTORE_LOCATION": str(trust),
            "KAFKA_SSL_TRUSTSTORE_TYPE": stores,
            "KAFKA_SSL_TRUSTSTORE_PASSWORD": password,
        }
    if listener == "MTLS":
        env |= (
            {
                "KAFKA_SSL_KEYSTORE_LOCATION": str(tls / "client.pem"),
                "KAFKA_SSL_KEYSTORE_TYPE": "PEM",
            }
            if stores == "PEM"
            else {
                "KAFKA_SSL_KEYSTORE_LOCATION": str(tls / "client.p12"),
                "KAFKA_SSL_KEYSTORE_TYPE": "PKCS12",
                "KAFKA_SSL_KEYSTORE_PASSWORD": password,
            }
        )
    if listener == "SASL_SSL":
        env |= {
            "KAFKA_SASL_MECHANISM": mechanism,
            "KAFKA_SASL_USERNAME": login[0],
            "KAFKA_SASL_PASSWORD": login[1],
        }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return broker.tls_bootstrap_servers[listener]


def user_caches() -> list[Path]:
    """The folders a project's runs write outside it (kedro_streaming._session.session):
    the jars Spark's packages resolved to, the JVM's class-data archives."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return [root / "spark-packages", root / "spark-class-archives"]


def files_holding(roots: list[Path], secrets: tuple[str, ...]) -> list[Path]:
    """The files below ``roots`` that hold any of ``secrets`` (as UTF-8)."""
    needles = [secret.encode() for secret in secrets]
    return [
        path
        for root in roots
        for path in root.rglob("*")
        if path.is_file() and any(needle in path.read_bytes() for needle in needles)
    ]


def assert_serves_no_secret(
    ui_port: int, metrics_port: int, query: str, secrets: tuple[str, ...]
) -> None:
    """What a running project serves holds none of ``secrets``: the Spark UI's
    REST API and pages (the application's environment, jobs, SQL plans with
    their Kafka options, the streaming ``query``) and the metrics endpoint."""
    ui = f"http://127.0.0.1:{ui_port}"
    with urlopen(f"{ui}/api/v1/applications", timeout=10) as answer:
        app = json.loads(answer.read())[0]["id"]
    addresses = [
        *(
            f"{ui}/api/v1/applications/{app}/{path}"
            for path in ("environment", "jobs", "stages", "sql?details=true")
        ),
        *(f"{ui}/{page}/" for page in ("jobs", "SQL", "environment", "StreamingQuery")),
        f"http://127.0.0.1:{metrics_port}/metrics",
    ]
    pages = {}
    for address in addresses:
        with urlopen(address, timeout=10) as answer:
            pages[address] = answer.read().decode("utf-8", errors="replace")
    assert "spark.master" in pages[addresses[0]]
    assert any(query in text for text in pages.values())
    leaks = [page for page, text in pages.items() if any(x in text for x in secrets)]
    assert leaks == []
