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
_UNSUPPORTED_MECHANISM, _AUTHENTICATION_FAILED = 33, 58


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
