"""Kafka from the command line: produce taxi trips, watch a topic.

    python -m {{ cookiecutter.python_package }}.kafka_client produce                 # the bundled trips
    python -m {{ cookiecutter.python_package }}.kafka_client produce --source green_tripdata_2021-01.parquet --rate 200
    python -m {{ cookiecutter.python_package }}.kafka_client watch                   # the summary topic

``produce`` sends each trip as a JSON object, keyed by its PULocationID, and
creates the topic with ``--partitions`` partitions if missing.
Connection settings come from ``conf/kafka/globals.yml`` unless given; SASL
settings from the environment (``KAFKA_SECURITY_PROTOCOL``,
``KAFKA_SASL_MECHANISM``, ``KAFKA_SASL_USERNAME``, ``KAFKA_SASL_PASSWORD``), so
that no password is typed on a command line.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import yaml

from . import example_data

logger = logging.getLogger(__name__)
GLOBALS = Path("conf/kafka/globals.yml")


def bundled_messages(files: int) -> Iterator[str]:
    """The JSON lines of the first ``files`` example files, bad records included."""
    for index in range(files):
        yield from example_data.trip_records(index)


def file_messages(path: Path) -> Iterator[str]:
    """Rows of a TLC CSV or parquet file as JSON objects.

    Parquet is read with pandas, whose ``to_json`` writes datetimes as epoch
    milliseconds; ``parse_trips`` reads both those and ISO-8601 strings.
    """
    if path.suffix == ".parquet":
        import pandas as pd  # noqa: PLC0415 - only this source needs pandas

        yield from (
            pd.read_parquet(path).to_json(orient="records", lines=True).splitlines()
        )
        return
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            yield json.dumps(
                {key: value if value != "" else None for key, value in row.items()}
            )


def message_key(line: str) -> bytes | None:
    try:
        location = json.loads(line).get("PULocationID")
    except (ValueError, AttributeError):
        return None
    return None if location is None else str(location).encode()


def security_settings(environ: dict[str, str] = os.environ) -> dict[str, str]:
    """kafka-python security settings from the environment."""
    settings = {}
    if environ.get("KAFKA_SECURITY_PROTOCOL"):
        settings["security_protocol"] = environ["KAFKA_SECURITY_PROTOCOL"]
    if environ.get("KAFKA_SASL_USERNAME"):
        settings["sasl_mechanism"] = environ.get("KAFKA_SASL_MECHANISM", "PLAIN")
        settings["sasl_plain_username"] = environ["KAFKA_SASL_USERNAME"]
        settings["sasl_plain_password"] = environ.get("KAFKA_SASL_PASSWORD", "")
    return settings


def ensure_topic(
    bootstrap_servers: str, topic: str, partitions: int, **security
) -> None:
    """Creates ``topic`` unless it exists."""
    from kafka.admin import KafkaAdminClient, NewTopic  # noqa: PLC0415
    from kafka.errors import TopicAlreadyExistsError  # noqa: PLC0415

    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, **security)
    try:
        if topic not in admin.list_topics():
            admin.create_topics([NewTopic(topic, partitions, replication_factor=1)])
            logger.info("Created topic %s with %d partitions.", topic, partitions)
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()


def produce(
    messages: Iterator[str],
    bootstrap_servers: str,
    topic: str,
    *,
    rate: float = 0.0,
    count: int | None = None,
    partitions: int = 3,
    **security,
) -> int:
    """Sends messages to ``topic``; returns how many were acknowledged.

    Args:
        messages: JSON lines to send.
        bootstrap_servers: The broker list, ``host:port[,host:port]``.
        topic: Created with ``partitions`` partitions if missing.
        rate: Messages per second; 0 sends as fast as possible.
        count: Stop after this many messages.
        partitions: Partitions of a topic this call creates.
        **security: kafka-python security settings.
    """
    from kafka import KafkaProducer  # noqa: PLC0415

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
                producer.send(topic, key=message_key(line), value=line.encode())
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
    from kafka import KafkaConsumer  # noqa: PLC0415

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


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    defaults = yaml.safe_load(GLOBALS.read_text())["kafka"] if GLOBALS.exists() else {}
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--bootstrap-servers",
        default=defaults.get("bootstrap_servers", "localhost:9092"),
    )
    commands = parser.add_subparsers(dest="command", required=True)

    produce_cmd = commands.add_parser("produce", help="send taxi trips to a topic")
    produce_cmd.add_argument(
        "--topic", default=defaults.get("trips_topic", "taxi-trips")
    )
    produce_cmd.add_argument(
        "--source",
        type=Path,
        help="a TLC .csv or .parquet file (default: the bundled trips)",
    )
    produce_cmd.add_argument(
        "--files", type=int, default=8, help="bundled example files to send (default 8)"
    )
    produce_cmd.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="messages per second (default: as fast as possible)",
    )
    produce_cmd.add_argument(
        "--count", type=int, help="send at most this many messages"
    )
    produce_cmd.add_argument(
        "--partitions",
        type=int,
        default=3,
        help="partitions of a new topic (default 3)",
    )

    watch_cmd = commands.add_parser("watch", help="print a topic's messages")
    watch_cmd.add_argument(
        "--topic", default=defaults.get("summary_topic", "taxi-hourly-borough-summary")
    )
    watch_cmd.add_argument(
        "--idle-seconds",
        type=float,
        default=0.0,
        help="stop after this long without messages",
    )
    args = parser.parse_args(argv)

    started = time.monotonic()
    if args.command == "watch":
        seen = watch(
            args.bootstrap_servers, args.topic, args.idle_seconds, **security_settings()
        )
        logger.info("%d messages on %s", seen, args.topic)
        return
    messages = (
        file_messages(args.source) if args.source else bundled_messages(args.files)
    )
    sent = produce(
        messages,
        args.bootstrap_servers,
        args.topic,
        rate=args.rate,
        count=args.count,
        partitions=args.partitions,
        **security_settings(),
    )
    sys.stdout.write(
        f"Sent {sent} messages to {args.topic} at {args.bootstrap_servers} "
        f"in {time.monotonic() - started:.1f} s\n"
    )


if __name__ == "__main__":
    main()
