"""One Kafka security configuration, read from a credentials entry, for every
client the project uses: Spark's ``kafka.*`` options and kafka-python's
arguments alike (protocol, SASL login, trust and key stores, hostnames)."""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Mapping
from functools import cached_property
from typing import Any

from kedro_streaming._connectors.kafka.stores import (
    load_key_and_chain,
    open_store,
    pem,
    read_store,
)
from kedro_streaming.errors import StreamingConfigError

# The short keys of a credentials entry, and the Kafka setting each stands for.
SHORT_KEYS = {
    "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism",
}
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# A JAAS option: name=value, the value bare or quoted (with backslash escapes,
# as Kafka's parser, java.io.StreamTokenizer, reads them).
_JAAS_OPTION = re.compile(r'([\w.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))', re.S)
_JAAS_UNESCAPE = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f"}


def jaas_quote(value: str) -> str:
    """``value`` as a quoted JAAS option value: read back unchanged by Kafka's
    parser, whatever it holds (quotes, backslashes, ``;``, line breaks)."""
    escaped = (
        value.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\r", "\\r")
    )
    return f'"{escaped}"'


def jaas_config(mechanism: str, username: str, password: str) -> str:
    """The client login of a SASL mechanism, its values escaped."""
    module = _LOGIN_MODULES.get(mechanism)
    if module is None:
        raise StreamingConfigError(
            f"sasl_mechanism {mechanism!r} is not one the credentials' username and "
            f"password log in with ({', '.join(_LOGIN_MODULES)}): for another one, "
            "give `kafka.sasl.jaas.config` (and its settings) in the entry instead"
        )
    return (
        f"{module} required username={jaas_quote(username)} "
        f"password={jaas_quote(password)};"
    )


def jaas_options(config: str) -> dict[str, str]:
    """The options of a JAAS login (``username``, ``password``...), unescaped."""
    return {
        name: bare
        or re.sub(
            r"\\(.)", lambda m: _JAAS_UNESCAPE.get(m[1], m[1]), quoted, flags=re.S
        )
        for name, quoted, bare in _JAAS_OPTION.findall(config)
    }


class KafkaSecurity:
    """The security settings of one Kafka credentials entry: Kafka's client
    settings with Spark's ``kafka.`` prefix, and the short keys
    ``security_protocol``, ``sasl_mechanism``, ``username`` and ``password``.

    Example:
        >>> from kedro_streaming import KafkaSecurity
        >>> security = KafkaSecurity(  # a credentials.yml entry, as a dataset reads it
        ...     {"security_protocol": "SASL_PLAINTEXT", "username": "taxi-app",
        ...      "sasl_mechanism": "SCRAM-SHA-512", "password": "s3cret"}
        ... )
        >>> security.username, security.uses_tls
        ('taxi-app', False)
        >>> security.spark_options()["kafka.sasl.jaas.config"]
        '...ScramLoginModule required username="taxi-app" password="s3cret";'
        >>> sorted(security.kafka_python())
        ['sasl_mechanism', 'sasl_plain_password', 'sasl_plain_username',
         'security_protocol']
    """

    def __init__(self, credentials: Mapping[str, Any] | None = None) -> None:
        credentials = dict(credentials or {})
        settings = {
            key.removeprefix("kafka."): str(value)
            for key, value in credentials.items()
            if key.startswith("kafka.") and value is not None
        }
        for short, setting in SHORT_KEYS.items():
            if credentials.get(short):
                settings[setting] = str(credentials[short])
        if credentials.get("username"):
            settings.setdefault("sasl.mechanism", "PLAIN")
            settings["sasl.jaas.config"] = jaas_config(
                settings["sasl.mechanism"],
                str(credentials["username"]),
                str(credentials.get("password") or ""),
            )
        self.settings = settings
        """Kafka's client settings, without Spark's ``kafka.`` prefix."""

    @property
    def protocol(self) -> str:
        return self.settings.get("security.protocol", "PLAINTEXT").upper()

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def mechanism(self) -> str:
        return self.settings.get("sasl.mechanism", "GSSAPI").upper()

    @property
    def username(self) -> str | None:
        """The SASL user (for messages: never the password)."""
        return jaas_options(self.settings.get("sasl.jaas.config", "")).get("username")

    @property
    def checks_hostname(self) -> bool:
        # Kafka's default is "https": the broker's certificate must name its host.
        return self.settings.get("ssl.endpoint.identification.algorithm", "https") != ""

    def spark_options(self) -> dict[str, str]:
        """The settings as Spark's Kafka options (secrets included)."""
        return {f"kafka.{key}": value for key, value in self.settings.items()}

    def kafka_python(self) -> dict[str, Any]:
        """The settings as kafka-python's client arguments (secrets included)."""
        client: dict[str, Any] = {"security_protocol": self.protocol}
        if self.uses_sasl:
            login = jaas_options(self.settings.get("sasl.jaas.config", ""))
            client["sasl_mechanism"] = self.mechanism
            client["sasl_plain_username"] = login.get("username")
            client["sasl_plain_password"] = login.get("password")
        if self.uses_tls:
            client["ssl_context"] = self.ssl_context
            client["ssl_check_hostname"] = self.checks_hostname
        return client

    @cached_property
    def ssl_context(self) -> ssl.SSLContext:
        """Python's TLS context from the same trust store, key store and
        hostname verification as Spark's client."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = self.checks_hostname
        trusted = self._trusted_certificates()
        if trusted is None:
            context.load_default_certs()  # as Java falls back to its cacerts
        else:
            context.load_verify_locations(cadata=trusted)
        key_and_chain = self._key_and_chain()
        if key_and_chain is not None:
            load_key_and_chain(context, *key_and_chain)
        return context

    def _store(self, store: str) -> tuple[str, str, str | None, bytes] | None:
        """A store's location, type, password and contents (None: not set)."""
        location = self.settings.get(f"ssl.{store}.location")
        if not location:
            return None
        # Empty (a variable set to nothing) is Kafka's default too.
        kind = (self.settings.get(f"ssl.{store}.type") or "JKS").upper()
        data = read_store(location, store, kind)
        return location, kind, self.settings.get(f"ssl.{store}.password"), data

    def _trusted_certificates(self) -> str | None:
        """The trust store's certificates as PEM text (None: none configured)."""
        inline = self.settings.get("ssl.truststore.certificates")
        if inline:
            return inline
        found = self._store("truststore")
        if found is None:
            return None
        location, kind, password, data = found
        if kind == "PEM":
            return data.decode("ascii", errors="replace")
        _, _, certificates = open_store(location, kind, password, data, "truststore")
        return "".join(pem(certificate) for certificate in certificates)

    def _key_and_chain(self) -> tuple[bytes, bytes, str | None] | None:
        """The key store's private key and certificate chain, as PEM bytes, and
        the key's password (None: no key store)."""
        inline_key = self.settings.get("ssl.keystore.key")
        key_password = self.settings.get("ssl.key.password")
        if inline_key:
            chain = self.settings.get("ssl.keystore.certificate.chain", "")
            return inline_key.encode(), chain.encode(), key_password
        found = self._store("keystore")
        if found is None:
            return None
        location, kind, password, data = found
        if kind == "PEM":
            return data, data, key_password
        key, certificate, others = open_store(
            location, kind, password, data, "keystore", key_password
        )
        if key is None:
            raise StreamingConfigError(
                f"the key store {location} (kafka.ssl.keystore.location) holds no "
                "private key: mutual TLS needs the client's key and certificate"
            )
        from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

        chain = b"".join(
            pem(c).encode() for c in [certificate, *others] if c is not None
        )
        # A fresh password for the moment the key is on disk (see below).
        one_time = os.urandom(16).hex()
        encrypted = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(one_time.encode()),
        )
        return encrypted, chain, one_time


def entry_security(entry: Any) -> KafkaSecurity:
    """The security of a catalog entry's clients: its credentials, and any
    ``kafka.`` option of its arguments."""
    options = {**entry.load_options, **entry.writer_options}
    return KafkaSecurity(
        {key: value for key, value in options.items() if key.startswith("kafka.")}
        | entry.credentials
    )


def client_config(entry: Any) -> dict[str, str]:
    """The Kafka client settings Spark derives from an entry's ``kafka.*``
    options and credentials (secrets included: never for display)."""
    options = {
        **entry.load_options,
        **entry.writer_options,
        **KafkaSecurity(entry.credentials).spark_options(),
    }
    return {
        key.removeprefix("kafka."): str(value)
        for key, value in options.items()
        if key.startswith("kafka.")
    }


def python_config(entry: Any) -> dict[str, Any]:
    """The same settings as kafka-python's client arguments, for the runtime's
    own calls to the brokers (secrets included: never for display)."""
    return {
        "bootstrap_servers": client_config(entry).get("bootstrap.servers"),
        **entry_security(entry).kafka_python(),
    }
