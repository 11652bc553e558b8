"""One Kafka security configuration for every client the project uses.

A Kafka dataset's credentials entry is read once into :class:`KafkaSecurity`,
which gives the same settings to Spark's Kafka client (``kafka.*`` options)
and to kafka-python (the checks, ``kedro streams status``, the lag metrics,
the development tools): protocol, SASL login, trust store, key store and
hostname verification. The entry holds Kafka's own client settings with
Spark's ``kafka.`` prefix, and may shorten the SASL login::

    kafka:
      security_protocol: SASL_SSL          # kafka.security.protocol
      sasl_mechanism: SCRAM-SHA-512        # kafka.sasl.mechanism
      username: taxi-app                   # with password: kafka.sasl.jaas.config
      password: ${oc.env:KAFKA_SASL_PASSWORD}
      kafka.ssl.truststore.location: /etc/kafka/ca.pem
      kafka.ssl.truststore.type: PEM       # or JKS, PKCS12 (Kafka's default: JKS)
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import socket
import ssl
import struct
import subprocess
import tempfile
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

from kedro_streaming._connectors.kafka_sasl import MECHANISMS, login_refusal
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
    options = {}
    for name, quoted, bare in _JAAS_OPTION.findall(config):
        if bare:
            options[name] = bare
            continue
        options[name] = re.sub(
            r"\\(.)", lambda m: _JAAS_UNESCAPE.get(m[1], m[1]), quoted, flags=re.S
        )
    return options


class KafkaSecurity:
    """The security settings of one Kafka credentials entry.

    Example (conf/<env>/credentials.yml, named by a dataset's ``credentials:``)::

        kafka:
          security_protocol: SSL
          kafka.ssl.truststore.location: certs/ca.pem
          kafka.ssl.truststore.type: PEM
          kafka.ssl.keystore.location: certs/client.p12   # mutual TLS
          kafka.ssl.keystore.type: PKCS12
          kafka.ssl.keystore.password: ${oc.env:KAFKA_KEYSTORE_PASSWORD}
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
            _load_key_and_chain(context, *key_and_chain)
        return context

    # -- stores --------------------------------------------------------------

    def _store(self, store: str) -> tuple[str, str, str | None, bytes] | None:
        """A store's location, type, password and contents (None: not set)."""
        location = self.settings.get(f"ssl.{store}.location")
        if not location:
            return None
        # Empty (a variable set to nothing) is Kafka's default too.
        kind = (self.settings.get(f"ssl.{store}.type") or "JKS").upper()
        data = _read_store(location, store)
        _check_not_pem(data, kind, location, store)
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
        _, _, certificates = _open_store(location, kind, password, data, "truststore")
        return "".join(_pem(certificate) for certificate in certificates)

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
        key, certificate, others = _open_store(
            location, kind, password, data, "keystore", key_password
        )
        if key is None:
            raise StreamingConfigError(
                f"the key store {location} (kafka.ssl.keystore.location) holds no "
                "private key: mutual TLS needs the client's key and certificate"
            )
        from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

        chain = b"".join(
            _pem(c).encode() for c in [certificate, *others] if c is not None
        )
        # A fresh password for the moment the key is on disk (see below).
        one_time = os.urandom(16).hex()
        encrypted = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(one_time.encode()),
        )
        return encrypted, chain, one_time


def _read_store(location: str, kind: str) -> bytes:
    setting = f"kafka.ssl.{kind}.location"
    try:
        return Path(location).expanduser().read_bytes()
    except FileNotFoundError:
        raise StreamingConfigError(
            f"the {_STORE_NAMES[kind]} {location} ({setting} in the credentials) "
            "does not exist: give the path of the file on this machine"
        ) from None
    except OSError as error:
        raise StreamingConfigError(
            f"the {_STORE_NAMES[kind]} {location} ({setting} in the credentials) "
            f"cannot be read: {error.strerror}"
        ) from None


_STORE_NAMES = {"truststore": "trust store", "keystore": "key store"}


def _check_not_pem(data: bytes, kind: str, location: str, store: str) -> None:
    """A PEM file read as the JKS Kafka assumes by default fails on its
    password: say what it is instead."""
    if kind != "PEM" and data.lstrip().startswith(b"-----BEGIN"):
        raise StreamingConfigError(
            f"the {_STORE_NAMES[store]} {location} is a PEM file, read as {kind}: "
            f"set kafka.ssl.{store}.type: PEM in the credentials "
            f"(KAFKA_SSL_{store.upper()}_TYPE=PEM with conf/kafka/credentials.yml)"
        )


def _open_store(location, kind, password, data, store, key_password=None):  # noqa: PLR0917
    """The key, certificate and other certificates of a JKS or PKCS12 store."""
    from cryptography.hazmat.primitives.serialization import pkcs12  # noqa: PLC0415

    if kind == "JKS" and not data.startswith(b"\xfe\xed\xfe\xed"):
        kind = "PKCS12"  # Java reads a PKCS12 file given as JKS, and so do we
    if kind == "JKS":
        data, password = _jks_as_pkcs12(location, password, store, key_password)
    elif kind != "PKCS12":
        raise StreamingConfigError(
            f"kafka.ssl.{store}.type {kind!r} is not one Kafka reads: JKS, PKCS12 "
            "or PEM"
        )
    try:
        loaded = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError:
        raise StreamingConfigError(
            f"the {_STORE_NAMES[store]} password (kafka.ssl.{store}.password in the "
            f"credentials) does not open {location}, or the file is not a "
            f"{kind} store"
        ) from None
    certificate = loaded.cert.certificate if loaded.cert else None
    others = [c.certificate for c in loaded.additional_certs]
    if store == "truststore" and certificate is not None:
        others.insert(0, certificate)
    return loaded.key, certificate, others


def _jks_as_pkcs12(location, password, store, key_password):
    """A JKS store converted by the JDK's keytool (Python reads no JKS)."""
    keytool = _keytool()
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
            keytool,
            "-importkeystore",
            "-noprompt",
            "-srckeystore",
            location,
            "-srcstoretype",
            "JKS",
            "-srcstorepass:env",
            "KS_SOURCE_PASSWORD",
            "-destkeystore",
            str(target),
            "-deststoretype",
            "PKCS12",
            "-deststorepass:env",
            "KS_TARGET_PASSWORD",
        ]
        if store == "keystore":
            command += ["-srckeypass:env", "KS_KEY_PASSWORD"]
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise StreamingConfigError(
                f"the {_STORE_NAMES[store]} password (kafka.ssl.{store}.password in "
                f"the credentials) does not open {location}, or the file is not a "
                f"JKS store ({done.stdout.strip().splitlines()[-1:] or ['keytool']})"
            )
        return target.read_bytes(), fresh


def _keytool() -> str:
    java_home = os.environ.get("JAVA_HOME")
    found = (
        str(Path(java_home) / "bin" / "keytool")
        if java_home and (Path(java_home) / "bin" / "keytool").is_file()
        else shutil.which("keytool")
    )
    if not found:
        raise StreamingConfigError(
            "reading a JKS store needs the JDK's keytool (on PATH or in JAVA_HOME): "
            "or convert the store to PKCS12 or PEM"
        )
    return found


def _pem(certificate) -> str:
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    return certificate.public_bytes(serialization.Encoding.PEM).decode()


def _load_key_and_chain(
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


# -- what stops a connection ---------------------------------------------------

_VERIFY_CAUSES = {
    10: "presents a certificate that has expired: have the broker's certificate renewed",
    9: "presents a certificate that is not valid yet: check this machine's clock",
    62: "presents a certificate that does not name the host it was reached by",
    64: "presents a certificate that does not name the address it was reached by",
}
# A Kafka ApiVersions request (version 0, correlation id 1, client id "check"):
# the first request of every Kafka client, answered before any login.
_API_VERSIONS = bytes.fromhex("0000000f00120000000000010005") + b"check"


LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


def connection_problem(
    servers: str, security: KafkaSecurity, timeout: float = 5.0
) -> str | None:
    """What stops a client with ``security`` from talking Kafka to the first
    broker of ``servers``, as the end of "the Kafka broker at X ...", or
    None when it answers.

    Found with a TCP connection, a TLS handshake as the Kafka client makes it
    and a first Kafka request: an unknown CA, a hostname mismatch, an expired
    or not yet valid certificate, a missing client certificate, a TLS client
    on a plain port and the reverse; then a SASL login (PLAIN, SCRAM) the
    brokers refuse (:func:`login_problem`).
    """
    host, _, port = servers.split(",", maxsplit=1)[0].strip().rpartition(":")
    host = host.strip("[]")
    try:
        raw = socket.create_connection((host, int(port)), timeout=timeout)
    except ConnectionRefusedError:
        if "," not in servers and host in LOCAL_HOSTS:
            # This machine says at once that nothing listens: no need to
            # wait for the Kafka client's timeout.
            return (
                "refuses connections: nothing listens there. Start the broker "
                "(`kedro streams broker start` runs one on localhost:9092), or "
                "point the dataset's kafka.bootstrap.servers at yours"
            )
        return None  # another broker of the list may answer: the client says
    except (OSError, ValueError):
        return None  # nothing listens: the Kafka client's timeout says so
    with raw:
        if security.uses_tls:
            problem = _tls_problem(raw, host, security)
        else:
            problem = _plain_problem(raw, host)
    return problem or login_problem(servers, security, timeout)


def login_problem(
    servers: str, security: KafkaSecurity, timeout: float = 5.0
) -> str | None:
    """Why the first broker of ``servers`` refuses ``security``'s SASL login
    (PLAIN, SCRAM), from its own answer, at once; None when it accepts it,
    or when this cannot tell (no SASL, another mechanism, no answer): the
    Kafka client's own attempt then says."""
    if not security.uses_sasl or security.mechanism not in MECHANISMS:
        return None
    host, _, port = servers.split(",", maxsplit=1)[0].strip().rpartition(":")
    host = host.strip("[]")
    client = security.kafka_python()
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as raw:
            connection = (
                security.ssl_context.wrap_socket(raw, server_hostname=host)
                if security.uses_tls
                else raw
            )
            with connection:
                return login_refusal(
                    connection,
                    security.mechanism,
                    client["sasl_plain_username"] or "",
                    client["sasl_plain_password"] or "",
                )
    except (OSError, ValueError, KeyError, struct.error):
        return None


def _answers_kafka(connection) -> bool:
    connection.sendall(_API_VERSIONS)
    return len(connection.recv(4)) == 4


def _tls_problem(  # noqa: PLR0911 (one return per cause)
    raw: socket.socket, host: str, security: KafkaSecurity
) -> str | None:
    try:
        with security.ssl_context.wrap_socket(raw, server_hostname=host) as tls:
            # TLS 1.3 ends the client's handshake before the broker has seen
            # its certificate: a refused one shows at the first exchange.
            if _answers_kafka(tls):
                return None
            return "closed the connection after the TLS handshake"
    except ssl.SSLCertVerificationError as error:
        cause = _VERIFY_CAUSES.get(error.verify_code)
        if cause is None:
            return (
                "presents a certificate signed by a CA the trust store does not "
                f"hold ({error.verify_message}): set kafka.ssl.truststore.location "
                "in the credentials to the CA that signed the brokers' certificates"
            )
        if error.verify_code in (62, 64):
            cause += (
                f" ({host}): connect by a name the certificate holds, or have it "
                "reissued with this one"
            )
        return cause
    except ssl.SSLError as error:
        reason = error.reason or ""
        if (
            "CERTIFICATE_REQUIRED" in reason
            or "BAD_CERTIFICATE" in reason
            or ("UNKNOWN_CA" in reason)
        ):
            return (
                "requires a client certificate (mutual TLS) it trusts, which the "
                "credentials do not give: set kafka.ssl.keystore.location (and "
                "its password) to a key and certificate the brokers' CA signed"
            )
        if "ALERT" in reason:
            return f"ended the TLS handshake ({reason})"
        return (
            "does not speak TLS on this port, while security_protocol is "
            f"{security.protocol}: use the port of its TLS listener, or the "
            "protocol of this one"
        )
    except OSError:
        return (
            "closed the connection during the TLS handshake: does it speak TLS "
            "on this port, and does it need a client certificate?"
        )


def _plain_problem(raw: socket.socket, host: str) -> str | None:
    """A plain client on a TLS port: the port completes a TLS handshake."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    probe.check_hostname = False
    probe.verify_mode = ssl.CERT_NONE
    raw.settimeout(3)
    try:
        with probe.wrap_socket(raw, server_hostname=host):
            pass
    except ssl.SSLError as error:
        # An alert is the server speaking TLS (one that wants a client
        # certificate, say); anything else is a port that does not.
        if "ALERT" not in (error.reason or ""):
            return None
    except OSError:
        return None
    return (
        "speaks TLS on this port, while security_protocol is PLAINTEXT or "
        "SASL_PLAINTEXT (the default, when the credentials entry the dataset "
        "names sets none: Kedro reads conf/base and the run's --env only, not "
        "conf/local with --env kafka): set security_protocol to SSL (or "
        "SASL_SSL) with a trust store, or use the port of its plain listener"
    )


# -- kafka-python's failures ---------------------------------------------------


def login_refused(logged: list[str]) -> bool:
    text = " ".join(logged)
    return "SaslAuthenticationFailed" in text or "Authentication failed" in text


def _login_refused_on_retry(
    servers: str, security: KafkaSecurity, attempts: int = 4
) -> bool:
    """Whether the brokers refuse the login, asked again: kafka-python
    sometimes sees the connection close before the broker's answer."""
    from kafka.admin import KafkaAdminClient  # noqa: PLC0415
    from kafka.errors import KafkaError  # noqa: PLC0415

    for _ in range(attempts):
        with kafka_python_logs() as logged:
            try:
                KafkaAdminClient(
                    bootstrap_servers=servers,
                    bootstrap_timeout_ms=3000,
                    **security.kafka_python(),
                ).close()
            except KafkaError:
                if login_refused(logged):
                    return True
            else:
                return False
    return False


class _Collect(logging.Handler):
    def __init__(self, messages: list[str]) -> None:
        super().__init__(logging.ERROR)
        self.messages = messages

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def kafka_python_logs():
    """Collects kafka-python's logged errors, and keeps them off the console:
    a refused login shows only there (the call itself then times out)."""
    messages: list[str] = []
    client_logger = logging.getLogger("kafka")
    handler = _Collect(messages)
    propagate = client_logger.propagate
    client_logger.addHandler(handler)
    client_logger.propagate = False
    try:
        yield messages
    finally:
        client_logger.removeHandler(handler)
        client_logger.propagate = propagate


def client_failure(
    servers: str, security: KafkaSecurity, error: Exception, logged: list[str]
) -> str:
    """Why a kafka-python call failed, as the end of "the Kafka broker at X ...".

    Args:
        logged: What kafka-python logged meanwhile (:func:`kafka_python_logs`).
    """
    try:
        problem = connection_problem(servers, security)
    except StreamingConfigError as store_error:
        return f"could not be reached: {store_error}"
    if problem:
        return problem
    text = " ".join(logged)
    if "AuthorizationFailed" in text or "AuthorizationFailed" in str(error):
        return (
            f"does not allow user '{security.username or '?'}' what was asked "
            f"({type(error).__name__}: {error})"
        )
    if security.uses_sasl and (
        login_refused(logged) or _login_refused_on_retry(servers, security)
    ):
        return (
            f"refused the {security.mechanism} login of user "
            f"'{security.username or '?'}': check the password (and the user) of "
            "the credentials"
        )
    return f"did not answer as asked ({type(error).__name__}: {error})"


_TOPIC_AUTHORIZATION_FAILED = 29  # Kafka's error code


def forbidden_topics(
    servers: str, security: KafkaSecurity, topics: list[str]
) -> list[str]:
    """The topics of ``topics`` the brokers do not let this client describe
    (they leave such topics out of a listing, as if they did not exist)."""
    from kafka.admin import KafkaAdminClient  # noqa: PLC0415

    with kafka_python_logs():
        admin = KafkaAdminClient(
            bootstrap_servers=servers,
            request_timeout_ms=5000,
            **security.kafka_python(),
        )
        try:
            described = admin.describe_topics(topics)
        finally:
            admin.close()
    refused = {
        topic["name"]
        for topic in described
        if topic["error_code"] == _TOPIC_AUTHORIZATION_FAILED
    }
    return [topic for topic in topics if topic in refused]
