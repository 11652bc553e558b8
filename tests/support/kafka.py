"""Kafka for the tests: sending, reading back, bad messages, Avro frames,
and checking each message's verdict.
"""

from __future__ import annotations

import base64
import io
import json
import random
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import fastavro
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from reference import (
    check,
    decode,
    zone_boroughs,
)

from support.common import CHUNK, RAW_PAYLOAD


def kafka_messages(servers: str, topic: str) -> dict:
    """A topic's messages by (topic, partition, offset)."""
    return {
        (r.topic, r.partition, r.offset): r.value for r in read_topics(servers, [topic])
    }


def point_at_broker(project: Path, servers: str, chunk: int = CHUNK) -> tuple[str, str]:
    """Points the project's `kafka` environment at ``servers``, with new topics."""
    suffix = uuid.uuid4().hex[:8]
    trips, summary = f"trips-{suffix}", f"summary-{suffix}"
    (project / "conf/kafka/globals.yml").write_text(
        f"output_root: data/kafka\nkafka:\n  bootstrap_servers: {servers}\n"
        f"  trips_topic: {trips}\n  summary_topic: {summary}\n"
        f"  checked_trips_topic: checked-{suffix}\n"
        f"  rejected_trips_topic: rejected-{suffix}\n"
        f"  max_offsets_per_trigger: {chunk}\n"
    )
    return trips, summary


def consume_all(servers: str, topic: str, expected: int, timeout: float = 60) -> list:
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=5000,
    )
    records, deadline = [], time.monotonic() + timeout
    try:
        while len(records) < expected and time.monotonic() < deadline:
            records += list(consumer)
    finally:
        consumer.close()
    return records


def bad_messages(template: dict, rule_breakers: list[dict]) -> list[bytes | None]:
    """Every kind of bad Kafka message the ingest pipeline must quarantine, and
    trips that break each expectation (``tools.trips.rule_breaking_trips``)."""

    def record(**changes) -> bytes:
        return json.dumps({**template, **changes}).encode()

    garbage = random.Random(7).randbytes(300)
    return [
        b"this is not json",
        b"\xff\xfe" + garbage,  # binary, not UTF-8
        record(passenger_count="two", fare_amount="ten"),  # wrong types
        record(trip_distance={"km": 3}),  # an object for a number
        # required fields missing
        json.dumps({"VendorID": 2, "store_and_fwd_flag": "N"}).encode(),
        b"",  # empty message
        None,  # null value (tombstone)
        record(PULocationID="x" * 1_000_000),  # about 1 MB
        record(fare_amount=-12.5, total_amount=-14.3),  # negative amounts
        record(total_amount=99_999_999.0),  # absurd amount
        # dropoff before pickup
        record(
            lpep_pickup_datetime=template["lpep_dropoff_datetime"],
            lpep_dropoff_datetime="2024-03-01 05:00:00",
        ),
        record(PULocationID=999, DOLocationID=0),  # unknown location IDs
        b"[]",
        b"42",
        b"null",
        b'{"VendorID": 2, "lpep_pickup_datetime": "2024-03-',  # truncated
        record(trip_distance=99_999.0),  # an impossible distance
        record(store_and_fwd_flag="N" * 1_000_000),  # a megabyte in a one-letter flag
        *[json.dumps(trip).encode() for trip in rule_breakers],
    ]


def send_to_one_partition(servers: str, topic: str, messages: list) -> None:
    producer = KafkaProducer(
        bootstrap_servers=servers, acks="all", max_request_size=2_000_000
    )
    try:
        for message in messages:
            # A tombstone needs a key: Kafka refuses a message with neither.
            key = b"tombstone" if message is None else None
            producer.send(topic, key=key, value=message, partition=0)
        producer.flush()
    finally:
        producer.close()


def payload(message: bytes | None) -> str | None:
    """What `raw_payload` must hold for a message: its text, or base64 bytes."""
    if message is None:
        return None
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(message).decode()


def avro_values(registry, records) -> list[tuple[int, dict]]:
    """Each record's value decoded from Confluent's framing with fastavro (not
    Spark): its schema id and its record, timestamps as naive UTC."""
    parsed: dict[int, object] = {}
    values = []
    for record in records:
        value = record.value
        assert value[:1] == b"\x00", value[:5]
        schema_id = int.from_bytes(value[1:5], "big")
        if schema_id not in parsed:
            parsed[schema_id] = fastavro.parse_schema(
                json.loads(registry.schema(schema_id))
            )
        decoded = fastavro.schemaless_reader(io.BytesIO(value[5:]), parsed[schema_id])
        values.append(
            (
                schema_id,
                {
                    name: field.astimezone(timezone.utc).replace(tzinfo=None)
                    if isinstance(field, datetime)
                    else field
                    for name, field in decoded.items()
                },
            )
        )
    return values


def read_topics(servers: str, topics: list[str], timeout: float = 60) -> list:
    """Every message on ``topics`` up to each partition's end offset when
    called; a topic not created yet reads as empty. Reading to the end offsets,
    not until the consumer is quiet for a while, keeps a slow broker or a busy
    machine from returning too few."""
    consumer = KafkaConsumer(
        bootstrap_servers=servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        existing = consumer.topics()  # asks the broker, not a cached view
        partitions = [
            TopicPartition(topic, partition)
            for topic in topics
            if topic in existing
            for partition in sorted(consumer.partitions_for_topic(topic))
        ]
        if not partitions:
            return []
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(partitions)
        records, deadline = [], time.monotonic() + timeout
        while any(consumer.position(p) < ends[p] for p in partitions):
            assert time.monotonic() < deadline, (
                f"{len(records)} messages read from {topics} in {timeout} s; "
                f"end offsets {ends}"
            )
            for batch in consumer.poll(timeout_ms=500).values():
                records += batch
        return records
    finally:
        consumer.close()


def wait_for_offsets(servers, topics, count, *, process, log, timeout=180) -> list:
    """The output messages, once every input offset below ``count`` has one."""
    deadline = time.monotonic() + timeout
    while True:
        records = read_topics(servers, topics)
        offsets = {json.loads(r.value)["kafka_offset"] for r in records}
        if offsets >= set(range(count)):
            return records
        assert process.poll() is None, log.read_text()[-5000:]
        assert time.monotonic() < deadline, (
            f"{len(offsets)} of {count} offsets out:\n{log.read_text()[-5000:]}"
        )
        time.sleep(1)


def assert_each_message(project, records, messages, trips_topic, outputs) -> dict:
    """Each input offset on the topic of its verdict, with the reference's
    reasons, payload, fields and zones, and its origin; returns the output
    messages by input offset."""
    boroughs = zone_boroughs(project / "data/01_raw/taxi_zone_lookup.csv")
    by_offset: dict[int, list] = {}
    for record in records:
        message = json.loads(record.value)
        by_offset.setdefault(message["kafka_offset"], []).append((record, message))
    assert sorted(by_offset) == list(range(len(messages)))
    for offset, copies in by_offset.items():
        trip, reason = check(decode(messages[offset]), set(boroughs))
        for record, message in copies:
            assert record.topic == outputs[reason is not None], offset
            assert message["rejection_reason"] == reason, offset
            assert message["kafka_topic"] == trips_topic
            assert message["kafka_partition"] == 0
            if reason:  # its payload, cut where Kafka's size limit needs it
                whole = payload(messages[offset])
                assert message["raw_payload"] == (whole and whole[:RAW_PAYLOAD])
                assert message["raw_payload_truncated"] == (
                    len(whole or "") > RAW_PAYLOAD
                )
            else:
                assert message["raw_payload"] is None
            if trip is not None:
                assert_same_trip(message, trip, boroughs)
        assert [m for _, m in copies].count(copies[0][1]) == len(copies)  # same copies

    return by_offset


def assert_same_trip(message: dict, trip: dict, boroughs: dict[int, str]) -> None:
    """A valid trip's message: every field of the reference's typed trip."""
    for name, want in trip.items():
        got = message[name]
        if isinstance(want, datetime) and isinstance(got, str):  # JSON's text
            got = datetime.fromisoformat(got.replace("Z", "+00:00")).replace(
                tzinfo=None
            )
        assert got == want, (name, got, want)
    assert message["pickup_borough"] == boroughs.get(trip["PULocationID"])
    assert message["dropoff_borough"] == boroughs.get(trip["DOLocationID"])
