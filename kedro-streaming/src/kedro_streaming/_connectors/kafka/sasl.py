"""Whether a Kafka broker refuses a SASL login (PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512), from the broker's answer, at once, on a connection of its
own. kafka-python makes the login's messages (its SASL mechanisms); this
sends them. (kafka-python's clients retry a refused login until their
bootstrap timeout, 30 s, and then say only that they could not bootstrap.)"""

from __future__ import annotations

import socket
import struct

from kafka.net.sasl import get_sasl_mechanism

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# Kafka's API keys (both asked at version 1) and error codes.
_HANDSHAKE, _AUTHENTICATE = 17, 36
_UNSUPPORTED_MECHANISM, _ILLEGAL_SASL_STATE, _AUTHENTICATION_FAILED = 33, 34, 58
# A Kafka answer is a few KiB; more is another protocol's bytes read as a size
# (an HTTP server's "HTTP" is 1.2 GB).
_LARGEST_ANSWER = 100 * 1024 * 1024


def without_sasl(protocol: str) -> str:
    """The protocol of a listener without SASL that ``protocol`` would be."""
    return "SSL" if protocol.upper() in ("SSL", "SASL_SSL") else "PLAINTEXT"


def listener_mismatch(
    connection: socket.socket, protocol: str, mechanism: str = "PLAIN"
) -> str | None:
    """Whether the listener on ``connection`` (nothing sent on it yet) takes a
    SASL login as ``protocol`` says, asked with a SaslHandshake: a listener
    without SASL answers it with ILLEGAL_SASL_STATE, a SASL one with its
    mechanisms. Returns why not, as the end of "the Kafka broker at X ...",
    or None when it matches.

    Raises:
        OSError: The connection failed or closed.
        ValueError: Not a Kafka broker's answer.
    """
    error, enabled = _Requests(connection).handshake(mechanism)
    plain = without_sasl(protocol)
    if protocol.upper().startswith("SASL_") and error == _ILLEGAL_SASL_STATE:
        return (
            f"takes no SASL login on this port (a {plain} listener), while "
            f"security_protocol is {protocol.upper()} with a {mechanism} login: use "
            f"the port of the brokers' {protocol.upper()} listener in "
            f"kafka.bootstrap.servers, or set security_protocol to {plain} and "
            "drop the login (username, password) from the credentials"
        )
    if not protocol.upper().startswith("SASL_") and error in (
        0,
        _UNSUPPORTED_MECHANISM,
    ):
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
    """Logs in on ``connection`` (TLS or not, nothing sent on it yet); returns
    why the broker refused, as the end of "the Kafka broker at X ...", or
    None when it accepts.

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
