"""Kafka's brokers asked directly, at once: does the port speak TLS or plain,
is the certificate trusted, is the SASL login accepted, which topics may this
user see; and the words for what a client failed on. (kafka-python's clients
retry a refused login until their bootstrap timeout, 30 s, and then say only
that they could not bootstrap.)"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import struct

from kafka.net.sasl import get_sasl_mechanism

from kedro_streaming._connectors.kafka.security import KafkaSecurity
from kedro_streaming.errors import StreamingConfigError

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
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# Kafka's API keys (both asked at version 1) and error codes.
_HANDSHAKE, _AUTHENTICATE = 17, 36
_UNSUPPORTED_MECHANISM, _ILLEGAL_SASL_STATE, _AUTHENTICATION_FAILED = 33, 34, 58
_TOPIC_AUTHORIZATION_FAILED = 29
# A Kafka answer is a few KiB; more is another protocol's bytes read as a size
# (an HTTP server's "HTTP" is 1.2 GB).
_LARGEST_ANSWER = 100 * 1024 * 1024


def _first_address(servers: str) -> tuple[str, str]:
    host, _, port = servers.split(",", maxsplit=1)[0].strip().rpartition(":")
    return host.strip("[]"), port


def connection_problem(
    servers: str, security: KafkaSecurity, timeout: float = 5.0
) -> str | None:
    """What stops a client with ``security`` from talking Kafka to the first
    broker of ``servers`` (a CA, hostname, certificate, TLS or plain port,
    listener or login problem), as the end of "the Kafka broker at X ...";
    None when it answers."""
    host, port = _first_address(servers)
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
    return (
        problem
        or _listener_problem(servers, security, timeout)
        or login_problem(servers, security, timeout)
    )


def _listener_problem(
    servers: str, security: KafkaSecurity, timeout: float
) -> str | None:
    """Whether the first broker answers as Kafka, on a listener that takes a
    SASL login if and only if ``security`` logs in; None when this cannot tell."""
    mechanism = security.mechanism if security.uses_sasl else "PLAIN"
    try:
        with _first_broker(servers, security, timeout) as connection:
            return listener_mismatch(connection, security.protocol, mechanism)
    except NotKafkaError:
        return (
            "answers, but not as a Kafka broker: is it the port of another "
            "service? Set the dataset's kafka.bootstrap.servers to the port of "
            "the brokers' listener (`kedro streams broker status` shows those "
            "of the local broker)"
        )
    except (OSError, ValueError, struct.error):
        return None


def login_problem(
    servers: str, security: KafkaSecurity, timeout: float = 5.0
) -> str | None:
    """Why the first broker refuses ``security``'s SASL login (PLAIN, SCRAM);
    None when it accepts it or this cannot tell: the client's attempt says."""
    if not security.uses_sasl or security.mechanism not in MECHANISMS:
        return None
    client = security.kafka_python()
    try:
        with _first_broker(servers, security, timeout) as connection:
            return login_refusal(
                connection,
                security.mechanism,
                client["sasl_plain_username"] or "",
                client["sasl_plain_password"] or "",
            )
    except (OSError, ValueError, KeyError, struct.error):
        return None


@contextlib.contextmanager
def _first_broker(servers: str, security: KafkaSecurity, timeout: float):
    host, port = _first_address(servers)
    with socket.create_connection((host, int(port)), timeout=timeout) as raw:
        if not security.uses_tls:
            yield raw
            return
        with security.ssl_context.wrap_socket(raw, server_hostname=host) as tls:
            yield tls


def _tls_problem(  # noqa: PLR0911 (one return per cause)
    raw: socket.socket, host: str, security: KafkaSecurity
) -> str | None:
    try:
        with security.ssl_context.wrap_socket(raw, server_hostname=host) as tls:
            # TLS 1.3 ends the client's handshake before the broker has seen
            # its certificate: a refused one shows at the first exchange.
            tls.sendall(_API_VERSIONS)
            if len(tls.recv(4)) == 4:
                return None
            return (
                "closed the connection after the TLS handshake: if it requires a "
                "client certificate (mutual TLS), set kafka.ssl.keystore.location "
                "in the credentials; else check that this port is the brokers' "
                "TLS listener"
            )
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
        if any(
            s in reason
            for s in ("CERTIFICATE_REQUIRED", "BAD_CERTIFICATE", "UNKNOWN_CA")
        ):
            return (
                "requires a client certificate (mutual TLS) it trusts, which the "
                "credentials do not give: set kafka.ssl.keystore.location (and "
                "its password) to a key and certificate the brokers' CA signed"
            )
        if "ALERT" in reason:
            return (
                f"ended the TLS handshake ({reason}): check the trust and key "
                "stores of the credentials against the brokers' TLS settings"
            )
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


def listener_mismatch(
    connection: socket.socket, protocol: str, mechanism: str = "PLAIN"
) -> str | None:
    """Why the listener on ``connection`` (nothing sent on it yet) does not take
    a SASL login as ``protocol`` says, or None, from its SaslHandshake answer:
    ILLEGAL_SASL_STATE without SASL, its mechanisms with.

    Raises:
        OSError: The connection failed or closed.
        ValueError: Not a Kafka broker's answer.
    """
    error, enabled = _Requests(connection).handshake(mechanism)
    plain = "SSL" if protocol.upper() in ("SSL", "SASL_SSL") else "PLAINTEXT"
    sasl = protocol.upper().startswith("SASL_")
    if sasl and error == _ILLEGAL_SASL_STATE:
        return (
            f"takes no SASL login on this port (a {plain} listener), while "
            f"security_protocol is {protocol.upper()} with a {mechanism} login: use "
            f"the port of the brokers' {protocol.upper()} listener in "
            f"kafka.bootstrap.servers, or set security_protocol to {plain} and "
            "drop the login (username, password) from the credentials"
        )
    if not sasl and error in (0, _UNSUPPORTED_MECHANISM):
        return (
            f"expects a SASL login on this port (a SASL_{plain} listener, taking "
            f"{', '.join(enabled) or 'no mechanism'}), while security_protocol is "
            f"{protocol.upper()}: set security_protocol to SASL_{plain} with "
            "sasl_mechanism, username and password in the credentials, or use the "
            f"port of the brokers' {protocol.upper()} listener"
        )
    return None


def login_refusal(
    connection: socket.socket, mechanism: str, username: str, password: str
) -> str | None:
    """Logs in on ``connection`` (nothing sent on it yet) with kafka-python's
    SASL messages: why the broker refused, or None.

    Raises:
        OSError: The connection failed or closed.
        ValueError: The broker answered something else than a login's steps.
    """
    broker = _Requests(connection)
    error, enabled = broker.handshake(mechanism)
    if error == _UNSUPPORTED_MECHANISM:
        return (
            f"does not take the {mechanism} login (it takes "
            f"{', '.join(enabled) or 'none'}): set sasl_mechanism in the credentials"
        )
    if error:
        raise ValueError(f"SaslHandshake error {error}")
    login = get_sasl_mechanism(mechanism)(
        sasl_mechanism=mechanism,
        sasl_plain_username=username,
        sasl_plain_password=password,
    )
    while True:
        error, answer = broker.authenticate(login.auth_bytes())
        if error == _AUTHENTICATION_FAILED:
            return (
                f"refused the {mechanism} login of user '{username}': check the "
                "password (and the user) of the credentials"
            )
        if error:
            raise ValueError(f"SaslAuthenticate error {error}")
        login.receive(answer)
        if login.is_done():  # the broker accepted each step
            return None


class NotKafkaError(ValueError):
    """What answered is not a Kafka broker."""


class _Requests:
    """Kafka requests (header v1, not flexible) on a blocking connection."""

    def __init__(self, connection: socket.socket) -> None:
        self._connection = connection
        self._correlation = 0

    def handshake(self, mechanism: str) -> tuple[int, list[str]]:
        """SaslHandshake v1: its error code and the broker's mechanisms."""
        answer = self._ask(_HANDSHAKE, _string(mechanism))
        error, count = struct.unpack_from(">hi", answer)
        offset, enabled = 6, []
        for _ in range(max(count, 0)):
            (length,) = struct.unpack_from(">h", answer, offset)
            enabled.append(answer[offset + 2 : offset + 2 + length].decode())
            offset += 2 + length
        return error, enabled

    def authenticate(self, message: bytes) -> tuple[int, bytes]:
        """SaslAuthenticate v1: its error code and the server's bytes."""
        answer = self._ask(_AUTHENTICATE, struct.pack(">i", len(message)) + message)
        error, text_length = struct.unpack_from(">hh", answer)
        offset = 4 + max(text_length, 0)
        (length,) = struct.unpack_from(">i", answer, offset)
        return error, answer[offset + 4 : offset + 4 + max(length, 0)]

    def _ask(self, api_key: int, body: bytes) -> bytes:
        self._correlation += 1
        header = struct.pack(">hhi", api_key, 1, self._correlation) + _string("check")
        self._connection.sendall(struct.pack(">i", len(header + body)) + header + body)
        (size,) = struct.unpack(">i", self._read(4))
        if not 4 <= size <= _LARGEST_ANSWER:
            raise NotKafkaError(f"not a Kafka answer (a size of {size} bytes)")
        answer = self._read(size)
        if struct.unpack_from(">i", answer)[0] != self._correlation:
            raise ValueError("an answer to another request")
        return answer[4:]

    def _read(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self._connection.recv(count - len(data))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            data += chunk
        return data


def _string(text: str) -> bytes:
    encoded = text.encode()
    return struct.pack(">h", len(encoded)) + encoded


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


@contextlib.contextmanager
def kafka_python_logs():
    """Collects kafka-python's logged errors, and keeps them off the console:
    a refused login shows only there (the call itself then times out)."""
    messages: list[str] = []
    client_logger = logging.getLogger("kafka")
    handler = logging.Handler(logging.ERROR)
    handler.emit = lambda record: messages.append(record.getMessage())
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
    """Why a kafka-python call failed, as the end of "the Kafka broker at X
    ..."; ``logged``: what kafka-python logged meanwhile."""
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
    return (
        f"did not answer as asked ({type(error).__name__}: {error}): check that "
        "kafka.bootstrap.servers is the port of the brokers' listener for the "
        f"credentials' security_protocol ({security.protocol})"
    )


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
