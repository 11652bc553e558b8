"""The trips sent into the realtime pipeline's topic at a steady rate:
librdkafka's producer paced in a process of its own, or Kafka's own load
generator (Java), for ``realtime_latency.py``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from avro_ingest import SERVERS, avro_frames


def framed_payloads(
    python: Path, project: Path, lines_file: Path, topic: str, registry_url
) -> Path:
    """The payloads for the Python producer, each 4-byte length-prefixed: the
    JSON lines, or each as Avro framed for ``topic``'s subject (schema
    version 1 of the project's ``tools.trips``)."""
    lines = lines_file.read_text().splitlines()
    if registry_url:
        values = avro_frames(
            python, project, lines_file, f"{topic}-value", registry_url
        )
    else:
        values = [line.encode() for line in lines]
    path = lines_file.with_suffix(".framed")
    path.write_bytes(b"".join(len(v).to_bytes(4, "big") + v for v in values))
    return path


# Every millisecond, what is due by then: a wake-up per message would cost
# the producing process more of the two cores than the producing itself.
# After a header that defines `producer`, `topic`, `count`, `rate` and
# `payload(n)`, message n's bytes.
PACING = """
start, sent = time.monotonic(), 0
while sent < count:
    due = min(count, int((time.monotonic() - start) * rate) + 1)
    while sent < due:
        try:
            producer.produce(topic, payload(sent))
            sent += 1
        except BufferError:
            producer.poll(0.01)
    producer.poll(0)
    time.sleep(0.001)
producer.flush()
"""

# A producer process of its own, so that the consumer thread here does not
# slow it down: librdkafka sends, Python only paces.
PACED_PRODUCER = (
    """
import sys, time
from confluent_kafka import Producer
servers, topic, path, count, rate = sys.argv[1:4] + [int(a) for a in sys.argv[4:6]]
data, payloads, at = open(path, "rb").read(), [], 0
while at < len(data):
    size = int.from_bytes(data[at:at + 4], "big")
    payloads.append(data[at + 4:at + 4 + size])
    at += 4 + size
producer = Producer({"bootstrap.servers": servers, "acks": "1", "linger.ms": 0})


def payload(n):
    return payloads[n % len(payloads)]
"""
    + PACING
)


def produce_paced(topic: str, payloads: Path, count: int, rate: int) -> None:
    """librdkafka's producer (confluent-kafka), paced at ``rate``."""
    subprocess.run(
        [sys.executable, "-c", PACED_PRODUCER, SERVERS, topic, str(payloads)]
        + [str(count), str(rate)],
        check=True,
    )


def produce(classpath: str, topic: str, payloads: Path, count: int, rate: int) -> None:
    """Kafka's own load generator (Java), paced at ``rate`` (``--producer
    java``): a JVM of its own, compiling as the query starts beside it."""
    subprocess.run(
        [
            "java",
            "-cp",
            classpath,
            "org.apache.kafka.tools.ProducerPerformance",
            *("--topic", topic, "--num-records", str(count)),
            *("--throughput", str(rate), "--payload-file", str(payloads)),
            "--producer-props",
            f"bootstrap.servers={SERVERS}",
            "acks=1",
            "linger.ms=0",
        ],
        check=True,
        capture_output=True,
    )
