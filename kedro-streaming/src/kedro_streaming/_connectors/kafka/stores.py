"""Kafka's trust and key stores (PKCS12, JKS, PEM) opened as kafka-python
and Python's ssl need them, each failure named with its store and fix."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import tempfile
from pathlib import Path

from kedro_streaming.errors import StreamingConfigError

_STORE_NAMES = {"truststore": "trust store", "keystore": "key store"}


def read_store(location: str, store: str, kind: str) -> bytes:
    """A store's bytes, each failure named (a PEM file read as the JKS Kafka
    assumes by default would fail on its password)."""
    setting = f"kafka.ssl.{store}.location"
    try:
        data = Path(location).expanduser().read_bytes()
    except FileNotFoundError:
        raise StreamingConfigError(
            f"the {_STORE_NAMES[store]} {location} ({setting} in the credentials) "
            "does not exist: give the path of the file on this machine"
        ) from None
    except OSError as error:
        raise StreamingConfigError(
            f"the {_STORE_NAMES[store]} {location} ({setting} in the credentials) "
            f"cannot be read: {error.strerror}: give the path of a file this user "
            "can read"
        ) from None
    if kind != "PEM" and data.lstrip().startswith(b"-----BEGIN"):
        raise StreamingConfigError(
            f"the {_STORE_NAMES[store]} {location} is a PEM file, read as {kind}: "
            f"set kafka.ssl.{store}.type: PEM in the credentials "
            f"(KAFKA_SSL_{store.upper()}_TYPE=PEM with conf/kafka/credentials.yml)"
        )
    return data


def open_store(location, kind, password, data, store, key_password=None):  # noqa: PLR0917
    """The key, certificate and other certificates of a JKS or PKCS12 store."""
    from cryptography.hazmat.primitives.serialization import pkcs12  # noqa: PLC0415

    if kind == "JKS" and not data.startswith(b"\xfe\xed\xfe\xed"):
        kind = "PKCS12"  # Java reads a PKCS12 file given as JKS, and so do we
    if kind == "JKS":
        data, password = _jks_as_pkcs12(location, password, store, key_password)
    elif kind != "PKCS12":
        raise StreamingConfigError(
            f"kafka.ssl.{store}.type {kind!r} is not one Kafka reads: set JKS, "
            "PKCS12 or PEM in the credentials"
        )
    try:
        loaded = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError:
        raise StreamingConfigError(
            f"the {_STORE_NAMES[store]} password (kafka.ssl.{store}.password in the "
            f"credentials) does not open {location}, or the file is not a "
            f"{kind} store: check the password, and kafka.ssl.{store}.type"
        ) from None
    certificate = loaded.cert.certificate if loaded.cert else None
    others = [c.certificate for c in loaded.additional_certs]
    if store == "truststore" and certificate is not None:
        others.insert(0, certificate)
    return loaded.key, certificate, others


def _jks_as_pkcs12(location, password, store, key_password):
    """A JKS store converted by the JDK's keytool (Python reads no JKS)."""
    tool = keytool()
    with tempfile.TemporaryDirectory(prefix="kedro-streaming-") as folder:
        target = Path(folder) / "store.p12"
        fresh = os.urandom(16).hex()
        # Passwords go through the environment, never the command line.
        env = {
            **os.environ,
            "KS_SOURCE_PASSWORD": password or "",
            "KS_TARGET_PASSWORD": fresh,
            "KS_KEY_PASSWORD": key_password or password or "",
        }
        command = [
            tool,
            *"-importkeystore -noprompt -srckeystore".split(),
            location,
            *"-srcstoretype JKS -srcstorepass:env KS_SOURCE_PASSWORD".split(),
            "-destkeystore",
            str(target),
            *"-deststoretype PKCS12 -deststorepass:env KS_TARGET_PASSWORD".split(),
        ]
        if store == "keystore" and key_password and key_password != password:
            # keytool takes a key password for one entry only: the key's.
            alias = _private_key_alias(tool, location, env)
            command += ["-srcalias", alias, "-srckeypass:env", "KS_KEY_PASSWORD"]
            command += ["-destkeypass:env", "KS_TARGET_PASSWORD"]
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise StreamingConfigError(
                f"the {_STORE_NAMES[store]} password (kafka.ssl.{store}.password in "
                f"the credentials) does not open {location}, or the file is not a "
                f"JKS store ({done.stdout.strip().splitlines()[-1:] or ['keytool']}): "
                f"check the password, and kafka.ssl.{store}.type"
            )
        return target.read_bytes(), fresh


def _private_key_alias(tool: str, location: str, env: dict[str, str]) -> str:
    """The alias of the first private key of a JKS store ("" if none)."""
    listed = subprocess.run(
        [tool, "-list", "-v", "-keystore", location, "-storetype", "JKS"]
        + ["-storepass:env", "KS_SOURCE_PASSWORD"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    entries = listed.split("Alias name: ")[1:]
    keys = [e.split("\n", 1)[0] for e in entries if "PrivateKeyEntry" in e]
    return keys[0] if keys else ""


def keytool() -> str:
    java_home = os.environ.get("JAVA_HOME")
    in_home = Path(java_home or ".") / "bin" / "keytool"
    found = str(in_home) if java_home and in_home.is_file() else shutil.which("keytool")
    if not found:
        raise StreamingConfigError(
            "reading a JKS store needs the JDK's keytool (on PATH or in JAVA_HOME): "
            "or convert the store to PKCS12 or PEM"
        )
    return found


def pem(certificate) -> str:
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    return certificate.public_bytes(serialization.Encoding.PEM).decode()


def load_key_and_chain(
    context: ssl.SSLContext, key: bytes, chain: bytes, password: str | None
) -> None:
    """Loads a key and chain given as bytes: Python's ssl reads them from files
    only, so they stay on disk for this call, in a folder only we can read,
    the key encrypted when it came from a store."""
    with tempfile.TemporaryDirectory(prefix="kedro-streaming-") as folder:
        key_file, chain_file = Path(folder) / "key.pem", Path(folder) / "chain.pem"
        key_file.write_bytes(key)
        chain_file.write_bytes(chain)
        try:
            context.load_cert_chain(chain_file, key_file, password=password)
        except ssl.SSLError as error:
            raise StreamingConfigError(
                "the key store's key and certificate do not load "
                f"({error.reason or error}): check kafka.ssl.keystore.* and "
                "kafka.ssl.key.password in the credentials"
            ) from None
