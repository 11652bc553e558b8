"""Messages to and from a topic, for development: a producer of any JSON
lines and a consumer that prints a topic, with the security settings of a
project's Kafka credentials (``kedro streams send | watch``)."""

from __future__ import annotations

import base64
import contextlib
import datetime
import decimal
import itertools
import json
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
from kafka.errors import (
    KafkaError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    TopicAlreadyExistsError,
)

from kedro_streaming._connectors.kafka.clients import client_security  # noqa: F401 (its home)
from kedro_streaming.errors import StreamingConfigError


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
    bootstrap_servers: str,
    topic: str,
    partitions: int,
    max_message_bytes: int | None = None,
    **security,
) -> None:
    """Creates ``topic`` unless it exists; ``max_message_bytes`` is then the
    largest message it accepts (its ``max.message.bytes``)."""
    configs = {"max.message.bytes": str(max_message_bytes)} if max_message_bytes else {}
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, **security)
    try:
        if topic not in admin.list_topics():
            admin.create_topics(
                [
                    NewTopic(
                        topic, partitions, replication_factor=1, topic_configs=configs
                    )
                ]
            )
            sys.stderr.write(f"Created topic {topic} with {partitions} partitions.\n")
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()


@dataclass
class Delivery:
    """What :func:`deliver` did: how many messages the brokers acknowledged,
    and each one not sent, as ``(number, reason)``."""

    acknowledged: int = 0
    failed: list[tuple[int, str]] = field(default_factory=list)
    stopped: int | None = None
    """The message at which sending stopped, the producer failing (its
    reason in ``failed``): those after it were not sent."""


def send(
    messages: Iterable[str],
    bootstrap_servers: str,
    topic: str,
    **options,
) -> int:
    """Sends messages to ``topic``; returns how many were acknowledged.

    Takes :func:`deliver`'s options; raises ValueError, after sending the
    others, naming each message (by its position, from 1) not sent.
    """
    delivery = deliver(enumerate(messages, 1), bootstrap_servers, topic, **options)
    problems = [f"message {number}: {reason}" for number, reason in delivery.failed]
    if delivery.stopped is not None:
        problems.append(
            f"sending stopped at message {delivery.stopped}: those after it were "
            "not sent"
        )
    if problems:
        raise ValueError(
            f"{len(delivery.failed)} messages not sent to {topic} "
            f"({delivery.acknowledged} sent): " + "; ".join(problems)
        )
    return delivery.acknowledged


def deliver(  # noqa: PLR0913 (the command's options)
    messages: Iterable[tuple[int, str]],
    bootstrap_servers: str,
    topic: str,
    *,
    rate: float = 0.0,
    count: int | None = None,
    partitions: int = 2,
    key: Callable[[str], bytes | None] | None = None,
    value: Callable[[str], bytes] | None = None,
    max_message_bytes: int | None = None,
    **security,
) -> Delivery:
    """Sends messages to ``topic``: each is acknowledged, or named with why not.

    A message the producer or the brokers refuse (too large, say) does not
    stop the others; a failure of the producer itself (no broker answers)
    stops it, and :attr:`Delivery.stopped` says so.

    Args:
        messages: ``(number, value)`` pairs: the number names the message
            in a failure (a line number, say); the value is text (JSON lines).
        bootstrap_servers: The broker list, ``host:port[,host:port]``.
        topic: Created with ``partitions`` partitions if missing.
        rate: Messages per second; 0 sends as fast as possible.
        count: Stop after this many messages.
        partitions: Partitions of a topic this call creates.
        key: The key of each message, from its value (none: no key).
        value: The bytes sent for each message (default: its UTF-8 text).
        max_message_bytes: The largest message the producer sends (Kafka's
            ``max.request.size``, 1 MiB by default), and the
            ``max.message.bytes`` of a topic this call creates.
        **security: kafka-python security settings.
    """
    ensure_topic(bootstrap_servers, topic, partitions, max_message_bytes, **security)
    limit = max_message_bytes or MAX_REQUEST_SIZE
    producer = KafkaProducer(
        bootstrap_servers=bootstrap_servers,
        acks="all",
        linger_ms=20,
        max_request_size=limit,
        # An idempotent producer takes a refused message as fatal, and drops
        # every message after it: here each message fails on its own.
        enable_idempotence=False,
        max_in_flight_requests_per_connection=1,  # in order, retries too
        **security,
    )
    delivery = Delivery()
    try:
        if count is not None:
            messages = itertools.islice(messages, count)
        outcomes = _send_each(producer, topic, messages, delivery, key, value, rate)
        producer.flush()
    finally:
        producer.close()
    topic_limit = _TopicLimit(bootstrap_servers, topic, security)
    for number, size, outcome in outcomes:
        if isinstance(outcome, Exception):  # the producer's own refusal
            delivery.failed.append((number, _refusal(outcome, size, limit)))
        elif outcome.succeeded():
            delivery.acknowledged += 1
        else:
            reason = _refusal(outcome.exception, size, limit, topic_limit)
            delivery.failed.append((number, reason))
    return delivery


def _send_each(producer, topic, messages, delivery, key, value, rate) -> list:  # noqa: PLR0913, PLR0917
    """Hands each message to ``producer``; returns, for each, its number,
    its size and its future (or the producer's refusal)."""
    outcomes: list[tuple[int, int, Any]] = []
    started = time.monotonic()
    for number, line in messages:
        message_key = key(line) if key else None
        message = value(line) if value else line.encode()
        size = len(message) + len(message_key or b"")
        try:
            outcome = producer.send(topic, key=message_key, value=message)
        except MessageSizeTooLargeError as error:
            outcome = error  # this one only: the next may fit
        except KafkaError as error:
            outcomes.append((number, size, error))
            delivery.stopped = number
            break
        outcomes.append((number, size, outcome))
        if rate > 0:
            # Pace against the start, so that slow sends do not add up.
            delay = started + len(outcomes) / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    return outcomes


MAX_REQUEST_SIZE = 1_048_576  # Kafka's default max.request.size


class _TopicLimit:
    """A topic's ``max.message.bytes``, asked of the brokers once if needed."""

    def __init__(self, servers: str, topic: str, security: dict[str, Any]) -> None:
        self.servers, self.topic, self.security = servers, topic, security
        self._value: str | None = None

    def __str__(self) -> str:
        if self._value is None:
            self._value = "its max.message.bytes"
            admin = KafkaAdminClient(bootstrap_servers=self.servers, **self.security)
            try:
                described = admin.describe_configs(
                    [ConfigResource(ConfigResourceType.TOPIC, self.topic)],
                    config_filter="all",
                )
                setting = described["topic"][self.topic]["max.message.bytes"]
                self._value = f"its max.message.bytes, {setting['value']}"
            except (KafkaError, KeyError, TypeError, ValueError):
                pass  # the refusal is still named, without the number
            finally:
                admin.close()
        return self._value


def _refusal(
    error: Exception | None,
    size: int,
    limit: int,
    topic_limit: _TopicLimit | None = None,
) -> str:
    """Why the producer (no ``topic_limit``) or the brokers did not take a
    message, and what to change."""
    sizes = f"{size} bytes (key and value), too large for"
    if isinstance(error, MessageSizeTooLargeError) and topic_limit is None:
        return (
            f"{sizes} the producer's max.request.size ({limit}): raise it "
            "with --max-message-bytes"
        )
    if topic_limit and isinstance(
        error, MessageSizeTooLargeError | RecordListTooLargeError
    ):
        topic = topic_limit.topic
        return (
            f"{sizes} topic {topic} ({topic_limit}): the "
            "brokers refused it. Raise the topic's max.message.bytes "
            f"(kafka-configs.sh --alter --entity-type topics --entity-name {topic} "
            "--add-config max.message.bytes=N); --max-message-bytes raises the "
            "producer's limit, and that of a topic it creates, only"
        )
    return f"{type(error).__name__}: {error}"


def watch(bootstrap_servers: str, topic: str, idle_seconds: float, **security) -> int:
    """Prints every message of ``topic`` from the start, as ``key<TAB>value``
    text; returns how many.

    Stops after ``idle_seconds`` without a new message (0: never).
    """
    seen = 0
    with _consumer(bootstrap_servers, topic, idle_seconds, **security) as messages:
        for message in messages:
            key = (message.key or b"").decode(errors="replace")
            value = (message.value or b"").decode(errors="replace")  # or a tombstone
            sys.stdout.write(f"{key}\t{value}\n")
            sys.stdout.flush()
            seen += 1
    return seen


def watch_avro(
    bootstrap_servers: str,
    topic: str,
    idle_seconds: float,
    read: Callable[[bytes], Any],
    **security,
) -> tuple[int, int]:
    """Prints every message of ``topic`` from the start as a JSON line:
    ``topic``, ``partition``, ``offset``, ``timestamp`` (epoch milliseconds),
    ``key`` and ``value``, each decoded by ``read``
    (:func:`~kedro_streaming._connectors.avro.registry.avro_reader`; a key only when it
    is framed, else its text). A message that does not decode is named on
    stderr, with its offset and why.

    Returns:
        How many messages were printed, and how many did not decode.
    """
    printed = undecoded = 0
    with _consumer(bootstrap_servers, topic, idle_seconds, **security) as messages:
        for message in messages:
            try:
                record = _decoded(message, read)
            except _Undecodable as error:
                undecoded += 1
                sys.stderr.write(
                    f"not decoded: {message.topic} partition {message.partition} "
                    f"offset {message.offset}: {error}\n"
                )
                continue
            sys.stdout.write(json.dumps(record, default=_json_value) + "\n")
            sys.stdout.flush()
            printed += 1
    return printed, undecoded


def _decoded(message, read: Callable[[bytes], Any]) -> dict[str, Any]:
    key = message.key
    if key is not None and key[:1] == b"\x00" and len(key) >= 5:
        key = _read(read, key, "key")
    elif key is not None:
        key = key.decode(errors="replace")
    # A tombstone stays null.
    value = None if message.value is None else _read(read, message.value, "value")
    return {
        "topic": message.topic,
        "partition": message.partition,
        "offset": message.offset,
        "timestamp": message.timestamp,
        "key": key,
        "value": value,
    }


class _Undecodable(ValueError):
    """A message's key or value that does not decode (the message says why)."""


def _read(read: Callable[[bytes], Any], data: bytes, part: str) -> Any:
    try:
        return read(data)
    except StreamingConfigError:
        raise  # the registry does not answer: no message is to blame
    except ValueError as error:
        raise _Undecodable(f"{part}: {error}") from None


def _json_value(value: Any) -> Any:
    """What JSON has no type for: Avro's dates and times as ISO 8601 text,
    decimals and UUIDs as text, bytes as base64."""
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} has no JSON form")


@contextlib.contextmanager
def _consumer(bootstrap_servers: str, topic: str, idle_seconds: float, **security):
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
    try:
        yield consumer
    finally:
        consumer.close()
