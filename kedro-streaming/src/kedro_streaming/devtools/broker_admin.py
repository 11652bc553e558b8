"""A running broker, through Kafka's Admin API (kafka-python): whether it
answers, and its SCRAM-SHA-512 logins."""

from __future__ import annotations

from collections.abc import Mapping

from kafka.admin import (
    KafkaAdminClient,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka.errors import KafkaError

from kedro_streaming.devtools.broker_config import NODE_ID
from kedro_streaming.devtools.broker_jars import BrokerError


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
