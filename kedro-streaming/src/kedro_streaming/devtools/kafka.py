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
            new = NewTopic(
                topic, partitions, replication_factor=1, topic_configs=configs
            )
            admin.create_topics([new])
            sys.stderr.write(f"Created topic {topic} with {partitions} partitions.\n")
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()


@dataclass
class Delivery:
    """What :func:`deliver` did: messages acknowledged, and ``(number,
    reason)`` of each one not sent."""

    acknowledged: int = 0
    failed: list[tuple[int, str]] = field(default_factory=list)
    stopped: int | None = None
    """The message at which the producer failed: those after it were not sent."""


def send(
    messages: Iterable[str],
    bootstrap_servers: str,
    topic: str,
    **options,
) -> int:
    """Sends messages to ``topic`` (:func:`deliver`'s options); returns how
    many were acknowledged, or raises ValueError naming each one not sent."""
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
    """Sends ``(number, text)`` messages to ``topic`` (created with
    ``partitions`` if missing): each is acknowledged, or named with why not.

    A message refused (too large, say) does not stop the others; a failure of
    the producer itself does (:attr:`Delivery.stopped`). ``rate`` is messages
    per second (0: as fast as possible); ``key`` and ``value`` make a
    message's key and bytes from its text; ``max_message_bytes`` is the
    producer's ``max.request.size`` and a created topic's ``max.message.bytes``.
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
    """Each message's number, size and future (or the producer's refusal)."""
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
    """Why the producer (no ``topic_limit``) or the brokers refused a message."""
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
    """Prints every message of ``topic`` as ``key<TAB>value`` until
    ``idle_seconds`` pass without one (0: never); returns how many."""
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
    """Prints every message of ``topic`` as a JSON line, its key (if framed)
    and value decoded by ``read``; one that does not decode is named on
    stderr. Returns how many were printed, and how many did not decode."""
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
    """What JSON has no type for: dates, decimals, UUIDs as text, bytes as base64."""
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} has no JSON form")


@contextlib.contextmanager
def _consumer(bootstrap_servers: str, topic: str, idle_seconds: float, **security):
    idle_ms = int(idle_seconds * 1000) if idle_seconds > 0 else float("inf")
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap_servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=idle_ms,
        **security,
    )
    try:
        yield consumer
    finally:
        consumer.close()
