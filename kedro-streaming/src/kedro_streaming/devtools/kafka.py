"""Messages to and from a topic, for development: a producer of any JSON
lines and a consumer that prints a topic, with the security settings of a
project's Kafka credentials (``kedro streams send | watch``)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from ..errors import StreamingConfigError
from ..security import KafkaSecurity, client_failure, kafka_python_logs


def client_security(
    credentials: dict[str, Any] | None, servers: str | None = None
) -> dict[str, Any]:
    """kafka-python settings from a Kafka entry of credentials.yml, the same
    the project's Kafka datasets take (:mod:`kedro_streaming.security`).

    Given ``servers``, the connection is tried first: a certificate, store or
    protocol that does not work is a ValueError naming the cause.
    """
    security = KafkaSecurity(credentials)
    try:
        settings = security.kafka_python()
    except StreamingConfigError as error:  # a store that does not load
        raise ValueError(str(error)) from None
    if servers:
        # A refused login shows only in kafka-python's log, after a timeout.
        with kafka_python_logs() as logged:
            try:
                KafkaAdminClient(
                    bootstrap_servers=servers, bootstrap_timeout_ms=10_000, **settings
                ).close()
            except KafkaError as error:
                failure = client_failure(servers, security, error, logged)
                raise ValueError(f"the Kafka broker at {servers} {failure}") from None
    return settings


def json_field(name: str) -> Callable[[str], bytes | None]:
    """A message key: the text of field ``name`` of a JSON line (none when the
    line is not a JSON object or has no such field)."""

    def key(line: str) -> bytes | None:
        try:
            value = json.loads(line).get(name)
        except (ValueError, AttributeError):
            return None
        return None if value is None else str(value).encode()

    return key


def ensure_topic(
    bootstrap_servers: str, topic: str, partitions: int, **security
) -> None:
    """Creates ``topic`` unless it exists."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, **security)
    try:
        if topic not in admin.list_topics():
            admin.create_topics([NewTopic(topic, partitions, replication_factor=1)])
            sys.stderr.write(f"Created topic {topic} with {partitions} partitions.\n")
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()


def send(
    messages: Iterator[str],
    bootstrap_servers: str,
    topic: str,
    *,
    rate: float = 0.0,
    count: int | None = None,
    partitions: int = 2,
    key: Callable[[str], bytes | None] | None = None,
    value: Callable[[str], bytes] | None = None,
    **security,
) -> int:
    """Sends messages to ``topic``; returns how many were acknowledged.

    Args:
        messages: The messages' values (JSON lines, say).
        bootstrap_servers: The broker list, ``host:port[,host:port]``.
        topic: Created with ``partitions`` partitions if missing.
        rate: Messages per second; 0 sends as fast as possible.
        count: Stop after this many messages.
        partitions: Partitions of a topic this call creates.
        key: The key of each message, from its value (none: no key).
        value: The bytes sent for each message (default: its UTF-8 text).
        **security: kafka-python security settings.
    """
    ensure_topic(bootstrap_servers, topic, partitions, **security)
    producer = KafkaProducer(
        bootstrap_servers=bootstrap_servers, acks="all", linger_ms=20, **security
    )
    started, sent = time.monotonic(), 0
    futures = []
    try:
        for line in messages:
            if count is not None and sent >= count:
                break
            futures.append(
                producer.send(
                    topic,
                    key=key(line) if key else None,
                    value=value(line) if value else line.encode(),
                )
            )
            sent += 1
            if rate > 0:
                # Pace against the start, so that slow sends do not add up.
                delay = started + sent / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
        producer.flush()
    finally:
        producer.close()
    acknowledged = sum(1 for future in futures if future.succeeded())
    if acknowledged != sent:
        raise RuntimeError(f"Only {acknowledged} of {sent} messages were acknowledged.")
    return acknowledged


def watch(bootstrap_servers: str, topic: str, idle_seconds: float, **security) -> int:
    """Prints every message of ``topic`` from the start; returns how many.

    Stops after ``idle_seconds`` without a new message (0: never).
    """
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap_servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=int(idle_seconds * 1000)
        if idle_seconds > 0
        else float("inf"),
        **security,
    )
    seen = 0
    try:
        for message in consumer:
            key = message.key.decode() if message.key else ""
            sys.stdout.write(f"{key}\t{message.value.decode(errors='replace')}\n")
            sys.stdout.flush()
            seen += 1
    finally:
        consumer.close()
    return seen
