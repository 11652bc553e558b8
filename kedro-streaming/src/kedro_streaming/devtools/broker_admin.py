"""A running broker, through Kafka's Admin API (kafka-python): whether it
answers, and its SCRAM-SHA-512 logins; why it did not start, from its log."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from kafka.admin import (
    KafkaAdminClient,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka.errors import KafkaError

from kedro_streaming.devtools.broker_config import NODE_ID
from kedro_streaming.devtools.broker_jars import BrokerError
from kedro_streaming.devtools.processes import tail


def probe(bootstrap_servers: str, timeout: float = 3.0, **security) -> dict:
    """Describes the cluster with kafka-python, as any client would see it.

    Args:
        bootstrap_servers: ``host:port`` of a listener.
        timeout: Seconds for connecting and for the request.
        **security: kafka-python security settings for a SASL listener.

    Returns:
        kafka-python's cluster description (``cluster_id``, ``brokers``...).

    Raises:
        KafkaError: No answer, credentials refused, or the broker is not
            registered yet.
    """
    millis = int(timeout * 1000)
    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap_servers,
        bootstrap_timeout_ms=millis,
        request_timeout_ms=millis,
        **security,
    )
    try:
        cluster = admin.describe_cluster()
    finally:
        admin.close()
    # A KRaft broker lists itself only once it is unfenced, ready for clients.
    if not any(broker["broker_id"] == NODE_ID for broker in cluster["brokers"]):
        raise KafkaError("the broker is not registered yet")
    return cluster


def create_scram_users(
    bootstrap_servers: str, users: Mapping[str, str], **security
) -> None:
    """Registers (or updates) ``users``' SCRAM-SHA-512 logins on a running
    broker, through the Admin API: no password on a command line."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, **security)
    try:
        errors = admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    user, ScramMechanism.SCRAM_SHA_512, password, iterations=8192
                )
                for user, password in users.items()
            ]
        )
    finally:
        admin.close()
    failed = {user: error for user, error in errors.items() if error}
    if failed:
        raise BrokerError(f"SCRAM users not created: {failed}")


def await_ready(
    proc: subprocess.Popen,
    servers: str,
    *,
    deadline: float,
    log_path: Path,
    sasl_servers: str | None = None,
    sasl_users: Mapping[str, str] | None = None,
) -> None:
    """Waits until the broker ``proc`` runs answers on ``servers`` (and, with
    ``sasl_users``, takes their logins on ``sasl_servers``).

    Raises:
        BrokerError: It exited, or did not answer by ``deadline`` (the message
            holds its log's end).
    """
    last_error: BaseException | None = None
    while True:
        code = proc.poll()
        if code is not None:
            cause = first_error(log_path)
            raise BrokerError(
                f"Kafka broker exited with code {code} during startup"
                + (f": {cause}" if cause else "")
                + f". Log {log_path} ends with:\n{tail(log_path, 60)}"
            )
        try:
            probe(servers, timeout=2.0)
            if sasl_users:
                _probe_logins(servers, sasl_servers, sasl_users)
            return
        except (KafkaError, OSError) as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            raise BrokerError(
                f"Kafka broker not ready on {servers} within the timeout "
                f"(last probe error: {last_error!r}). Log {log_path} ends with:\n"
                f"{tail(log_path, 60)}"
            )
        time.sleep(0.25)


def _probe_logins(servers: str, sasl_servers: str, users: Mapping[str, str]) -> None:
    # Again at each start: a changed password takes effect.
    create_scram_users(servers, users)
    # A real login: the listener takes these very credentials.
    user, password = next(iter(users.items()))
    probe(
        sasl_servers,
        timeout=2.0,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username=user,
        sasl_plain_password=password,
    )


def first_error(log_path: Path | None) -> str:
    """The broker log's first ERROR line, without its timestamp, and the
    exception line under it: why a start failed (a port taken, a bad
    setting), which the shutdown lines after it push out of the log's
    tail ('' if none)."""
    found: list[str] = []
    try:
        with open(log_path or "", encoding="utf-8", errors="replace") as log:
            for line in log:
                if found and (line.startswith("[") or len(found) == 2):
                    break  # the next record: the error and its cause are in
                if found or " ERROR " in line:
                    found.append(line.split(" ERROR ", 1)[-1].strip())
    except OSError:
        pass
    return " ".join(found)[:500]
