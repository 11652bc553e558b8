"""Avro against JSON through the ingest pipeline, from Kafka.

The same TLC-shaped trips go to two topics: as JSON, and as Avro in
Confluent's framing (schema version 1 of the project's ``tools.trips``,
registered in the local Apicurio Registry). Then, round after round, a
bounded run of ``ingest`` (``--params trigger=available_now``) reads each
topic from the start into fresh tables: JSON, then Avro, on the same broker,
PySpark and ``spark.yml``, each after ``handwritten_kafka.py`` doing the
same ingest by hand. Reports wall time, the ratio to the hand-written
script and rows per second of each run, and checks both runs read every
row.

    python benchmarks/avro_ingest.py [--rows 1000000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from batch import bench_project, kafka_spark_yml
from trips import trips

PARTITIONS = 2
SERVERS = "localhost:9092"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--workdir", type=Path, default=Path("/tmp/kedro-streaming-bench")
    )
    args = parser.parse_args()

    project, python = bench_project(args.workdir)
    devtools = [python, "-m", "kedro_streaming.devtools"]
    subprocess.run([*devtools, "broker", "start"], cwd=project, check=True)
    registry_url = start_registry(python, project)
    try:
        suffix = uuid.uuid4().hex[:8]
        topics = {fmt: f"bench-{fmt}-{suffix}" for fmt in ("json", "avro")}
        lines = trips(args.rows).to_json(orient="records", lines=True).splitlines()
        began = time.monotonic()
        produce(python, project, topics, lines, registry_url)
        print(
            f"{len(lines):,} trips produced to each topic in "
            f"{time.monotonic() - began:.0f} s",
            flush=True,
        )
        envs = {
            fmt: environment(project, fmt, topic, registry_url)
            for fmt, topic in topics.items()
        }
        for number in range(1, args.rounds + 1):
            rows = {}
            for fmt, env in envs.items():
                out = args.workdir / f"handwritten-{fmt}"
                shutil.rmtree(out, ignore_errors=True)
                by_hand = [python, HERE / "handwritten_kafka.py", project, out]
                by_hand += [topics[fmt], fmt, registry_url]
                hand_seconds = timed(by_hand, project)
                shutil.rmtree(project / "data" / env, ignore_errors=True)
                kedro = [python.parent / "kedro", "run", "--env", env]
                kedro += ["--pipelines", "ingest", "--params", "trigger=available_now"]
                seconds = timed(kedro, project)
                rows[fmt] = ingested(project, env)
                print(
                    f"round {number}, {fmt}: hand-written {hand_seconds:.1f} s, "
                    f"kedro run {seconds:.1f} s (ratio {seconds / hand_seconds:.2f}), "
                    f"{rows[fmt] / seconds:,.0f} rows/s ({rows[fmt]:,} rows in)",
                    flush=True,
                )
            assert rows["json"] == rows["avro"] == len(lines), rows
    finally:
        subprocess.run([*devtools, "registry", "stop"], cwd=project, check=False)
        subprocess.run([*devtools, "broker", "stop"], cwd=project, check=False)


def start_registry(python: Path, project: Path) -> str:
    """``kedro streams registry start`` in the project; the registry's URL."""
    started = subprocess.run(
        [python, "-m", "kedro_streaming.devtools", "registry", "start"],
        cwd=project,
        check=True,
        capture_output=True,
        text=True,
    )
    return started.stdout.strip().splitlines()[-1]


# Run by the project's python, which has the plugin and the project's tools:
# the JSON lines of a file as Avro records of schema version 1, each framed
# for the subject and written with a 4-byte length before it.
FRAMER = """
import sys
from pathlib import Path
sys.path.insert(0, ".")
from kedro_streaming import SchemaRegistry, avro_framer
from tools import trips
url, subject, source, target = sys.argv[1:5]
frame = avro_framer(SchemaRegistry(url), subject, trips.trip_avro_schema(1))
with open(target, "wb") as out:
    for line in Path(source).read_text().splitlines():
        value = frame(trips.avro_trip(line, 1))
        out.write(len(value).to_bytes(4, "big") + value)
"""


def avro_frames(  # noqa: PLR0917
    python: Path, project: Path, lines: Path, subject: str, registry_url: str
) -> list[bytes]:
    """The JSON lines of ``lines`` as Confluent-framed Avro for ``subject``."""
    target = lines.with_suffix(".avro-frames")
    subprocess.run(
        [python, "-c", FRAMER, registry_url, subject, lines, target],
        cwd=project,
        check=True,
    )
    data, frames, at = target.read_bytes(), [], 0
    while at < len(data):
        size = int.from_bytes(data[at : at + 4], "big")
        frames.append(data[at + 4 : at + 4 + size])
        at += 4 + size
    return frames


def produce(  # noqa: PLR0917
    python: Path, project: Path, topics: dict, lines: list[str], registry_url: str
) -> None:
    """Each JSON line to the JSON topic, and as Avro to the Avro topic, keyed
    by pickup location, with librdkafka's producer (confluent-kafka)."""
    from confluent_kafka import Producer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=SERVERS)
    admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics.values()])
    admin.close()
    source = project.parent / "avro-ingest-lines.jsonl"
    source.write_text("\n".join(lines) + "\n")
    frames = avro_frames(
        python, project, source, f"{topics['avro']}-value", registry_url
    )
    producer = Producer({"bootstrap.servers": SERVERS, "linger.ms": 20})
    for line, frame in zip(lines, frames, strict=True):
        key = str(json.loads(line)["PULocationID"]).encode()
        for topic, value in ((topics["json"], line.encode()), (topics["avro"], frame)):
            while True:
                try:
                    producer.produce(topic, value=value, key=key)
                    break
                except BufferError:  # the local queue is full: let it drain
                    producer.poll(0.1)
        producer.poll(0)
    producer.flush()


def environment(project: Path, fmt: str, topic: str, registry_url: str) -> str:
    """conf/kafka as shipped, on ``topic`` and its own tables; Avro values
    read through the registry for ``fmt`` avro."""
    env = f"bench-ingest-{fmt}"
    env_dir = project / "conf" / env
    shutil.rmtree(env_dir, ignore_errors=True)
    env_dir.mkdir()
    for name in ("catalog.yml", "globals.yml", "credentials.yml"):
        text = (project / "conf/kafka" / name).read_text()
        text = text.replace(" trips_topic: taxi-trips", f" trips_topic: {topic}")
        text = text.replace("output_root: data/kafka", f"output_root: data/{env}")
        if name == "globals.yml" and fmt == "avro":
            text = re.sub(
                r"(?m)^  schema_registry_url: .*$",
                f"  schema_registry_url: {registry_url}",
                text,
            )
            text += (
                "  trips_avro:\n    schema_registry_url: ${kafka.schema_registry_url}\n"
            )
        (env_dir / name).write_text(text)
    kafka_spark_yml(project, env_dir, [])
    return env


def timed(command: list, project: Path) -> float:
    """Wall time of ``command``, run in the project."""
    began = time.monotonic()
    done = subprocess.run(
        command,
        cwd=project,
        env={**os.environ, "KEDRO_DISABLE_TELEMETRY": "true"},
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.monotonic() - began
    if done.returncode:
        sys.exit(done.stdout[-3000:] + done.stderr[-3000:])
    return seconds


def ingested(project: Path, env: str) -> int:
    """Input rows of the run's bronze_trips batches, from its progress log."""
    log = project / "data" / env / "streams/progress.jsonl"
    return sum(
        record["input_rows"]
        for record in map(json.loads, log.read_text().splitlines())
        if record["query"] == "bronze_trips"
    )


if __name__ == "__main__":
    main()
