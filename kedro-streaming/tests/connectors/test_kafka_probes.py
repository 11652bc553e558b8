"""What the checks before start say of a listener that is not the one the
credentials expect, from the broker's own answers (here, made by hand as a
Kafka broker makes them; the starter's tests ask a real one)."""

import socket
import struct
import threading

import pytest
from kedro_streaming import KafkaSecurity
from kedro_streaming._connectors.kafka.probes import (
    NotKafkaError,
    connection_problem,
    listener_mismatch,
)

SASL_PLAINTEXT = {
    "security_protocol": "SASL_PLAINTEXT",
    "sasl_mechanism": "SCRAM-SHA-512",
    "username": "sensor-app",
    "password": "s3cret",
}


def handshake_answer(error: int, mechanisms: list[str]) -> bytes:
    """A SaslHandshake v1 response to the first request (correlation id 1)."""
    body = struct.pack(">ihi", 1, error, len(mechanisms)) + b"".join(
        struct.pack(">h", len(m)) + m.encode() for m in mechanisms
    )
    return struct.pack(">i", len(body)) + body


def asked(answer: bytes, protocol: str, mechanism: str = "PLAIN") -> str | None:
    client, broker = socket.socketpair()
    with client, broker:
        broker.sendall(answer)  # read once the request is sent
        return listener_mismatch(client, protocol, mechanism)


def test_a_sasl_login_on_a_listener_without_sasl_names_both_ways_out():
    # A listener without SASL answers a SaslHandshake with ILLEGAL_SASL_STATE.
    assert asked(handshake_answer(34, []), "SASL_PLAINTEXT", "SCRAM-SHA-512") == (
        "takes no SASL login on this port (a PLAINTEXT listener), while "
        "security_protocol is SASL_PLAINTEXT with a SCRAM-SHA-512 login: use the "
        "port of the brokers' SASL_PLAINTEXT listener in kafka.bootstrap.servers, "
        "or set security_protocol to PLAINTEXT and drop the login (username, "
        "password) from the credentials"
    )
    assert asked(handshake_answer(34, []), "SASL_SSL").startswith(
        "takes no SASL login on this port (a SSL listener), while "
        "security_protocol is SASL_SSL with a PLAIN login"
    )


def test_a_client_without_login_on_a_sasl_listener_is_told_to_log_in():
    for error in (0, 33):  # the mechanism asked taken, or not
        assert asked(
            handshake_answer(error, ["PLAIN", "SCRAM-SHA-512"]), "PLAINTEXT"
        ) == (
            "expects a SASL login on this port (a SASL_PLAINTEXT listener, taking "
            "PLAIN, SCRAM-SHA-512), while security_protocol is PLAINTEXT: set "
            "security_protocol to SASL_PLAINTEXT with sasl_mechanism, username and "
            "password in the credentials, or use the port of the brokers' "
            "PLAINTEXT listener"
        )


def test_a_listener_that_matches_the_credentials_says_nothing():
    assert asked(handshake_answer(34, []), "PLAINTEXT") is None
    assert asked(handshake_answer(0, ["PLAIN"]), "SASL_PLAINTEXT") is None
    with pytest.raises(NotKafkaError):
        asked(b"HTTP/1.1 400 Bad Request\r\n\r\n", "PLAINTEXT")


@pytest.fixture
def http_port():
    """A port where another service (HTTP) answers whatever it is sent."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except OSError:
                continue
            with connection:
                connection.settimeout(2)
                try:
                    connection.recv(4096)
                    connection.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


def test_the_port_of_another_service_is_named_as_such_at_once(http_port):
    problem = connection_problem(f"127.0.0.1:{http_port}", KafkaSecurity({}), 5)
    assert problem == (
        "answers, but not as a Kafka broker: is it the port of another service? "
        "Set the dataset's kafka.bootstrap.servers to the port of the brokers' "
        "listener (`kedro streams broker status` shows those of the local broker)"
    )
    # The same for a login, before any secret is sent.
    problem = connection_problem(
        f"127.0.0.1:{http_port}", KafkaSecurity(SASL_PLAINTEXT), 5
    )
    assert problem.startswith("answers, but not as a Kafka broker")
    assert "s3cret" not in problem


def test_a_local_port_where_nothing_listens_is_said_at_once():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # free again once closed
    assert connection_problem(f"localhost:{port}", KafkaSecurity({})) == (
        "refuses connections: nothing listens there. Start the broker (`kedro "
        "streams broker start` runs one on localhost:9092), or point the "
        "dataset's kafka.bootstrap.servers at yours"
    )
