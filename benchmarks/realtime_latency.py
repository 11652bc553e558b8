"""Produce -> consume latency of the realtime pipeline: Real-Time Mode against
micro-batches, at a real event rate.

Starts the project's local broker (``kedro streams broker start``), then,
round after round, runs ``kedro run --env <bench env> --pipelines realtime``
twice on fresh topics and checkpoints: once as shipped (the sink's
``realTime`` trigger, its checkpoint interval as shipped unless
``--checkpoint-interval``), once with the same sink in micro-batches
(``processingTime: 0 seconds``, a batch as soon as the last one ends), after
one run of ``--warm-up`` seconds that is not reported (the broker, started
here, compiles its request paths then). librdkafka's producer
(confluent-kafka, in a process of its own, paced in Python; ``--producer
java``: Kafka's own load generator, a JVM starting beside the query) sends
TLC-shaped trips at ``--rate`` for ``--seconds``; a consumer in this process
reads both output topics as they come. For each output message, the latency
is the time it was read minus its input message's Kafka timestamp
(``kafka_timestamp``, set by the producer); Spark's own share is the output
message's Kafka timestamp (set by Spark's producer) minus the same. Each
run's figures are reported by phase (``latency.py``): the first 10 s and the
first minute after the run says its query started, each checkpoint's
neighbourhood, and the steady state; then Spark's pause at each checkpoint,
from its jobs (the Spark UI's REST API) and its progress. The
latencies of every message are kept in ``<workdir>/realtime-*.latencies.csv``.

With ``--formats json,avro``, each mode runs once per format: Avro in and
out (the trips framed for the local Apicurio Registry, the project's
``trips_avro`` and ``messages_avro`` options), against JSON, on the same
producer (librdkafka's: Kafka's load generator sends text lines only).

    python benchmarks/realtime_latency.py [--rate 5000] [--seconds 300] [--rounds 1]
    python benchmarks/realtime_latency.py --formats json,avro --modes "Real-Time Mode"
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from avro_ingest import start_registry
from batch import bench_project, kafka_spark_yml
from breakdown import long_jobs, pause_lines, pauses, stage_launches
from kafka_rate import perf_classpath
from latency import (
    phase_lines,
    quantile,
    spark_jobs,
)
from producers import SERVERS, framed_payloads, produce, produce_paced
from trips import trips

PARTITIONS = 2  # at most Spark's cores (local[2]): Real-Time Mode holds one each
MICRO_BATCH = "processingTime: 0 seconds"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=5000, help="messages per second")
    parser.add_argument(
        "--seconds",
        type=int,
        default=300,
        help="how long to produce (300: two checkpoints at the shipped interval)",
    )
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--modes",
        default="Real-Time Mode,micro-batch",
        help="comma-separated, from: Real-Time Mode, micro-batch",
    )
    parser.add_argument(
        "--formats",
        default="json",
        help="comma-separated, from: json, avro (avro: the Python producer for all)",
    )
    parser.add_argument(
        "--producer",
        choices=("java", "python"),
        default="python",
        help="librdkafka's, paced in Python (the default), or Kafka's load "
        "generator (java; JSON only: a JVM of its own, starting with the query)",
    )
    parser.add_argument(
        "--warm-up",
        type=int,
        default=30,
        metavar="SECONDS",
        help="first, one run this long, not reported: the broker, started for "
        "the benchmark, compiles its request paths then, not in round 1 (0: none)",
    )
    parser.add_argument(
        "--run",
        choices=("kedro", "handwritten"),
        default="kedro",
        help="what runs the query: `kedro run`, or handwritten_realtime.py "
        "(the same plan started by hand: no hooks, no progress log)",
    )
    parser.add_argument(
        "--no-instruments",
        action="store_true",
        help="run `kedro run` itself, without spark_instruments.py (what "
        "reading them costs)",
    )
    parser.add_argument(
        "--checkpoint-interval", help="realtime_checkpoint_interval (default: shipped)"
    )
    parser.add_argument(
        "--workdir", type=Path, default=Path("/tmp/kedro-streaming-bench")
    )
    parser.add_argument(
        "--params",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a runtime parameter of `kedro run` (repeatable), e.g. "
        "realtime_planner_warm_up=50",
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting over conf/kafka/spark.yml (repeatable), e.g. "
        "spark.sql.codegen.wholeStage=false",
    )
    args = parser.parse_args()
    if args.params and args.run == "handwritten":
        parser.error("--params are `kedro run`'s: the script by hand takes none")
    if args.producer == "java" and "avro" in args.formats.split(","):
        parser.error("Kafka's load generator sends text lines only: --producer python")

    project, python = bench_project(args.workdir)
    payloads = args.workdir / "realtime-payloads.txt"
    payloads.write_text(
        trips(min(args.rate * args.seconds, 200_000)).to_json(
            orient="records", lines=True
        )
    )
    formats = args.formats.split(",")
    devtools = [python, "-m", "kedro_streaming.devtools"]
    subprocess.run([*devtools, "broker", "start"], cwd=project, check=True)
    try:
        if "avro" in formats:
            args.registry_url = start_registry(python, project)
        classpath = perf_classpath(python, project)
        if args.warm_up:
            # A broker that runs for days has its request paths compiled; one
            # started a moment ago compiles them on the query's two cores.
            warm_up = argparse.Namespace(**{**vars(args), "seconds": args.warm_up})
            mode = args.modes.split(",")[0]
            measure(
                warm_up, project, python, classpath, payloads, mode=mode, fmt=formats[0]
            )
            print(f"warm-up: one {args.warm_up} s run, not reported", flush=True)
        for number in range(1, args.rounds + 1):
            for mode in args.modes.split(","):
                for fmt in formats:
                    result = measure(
                        args, project, python, classpath, payloads, mode=mode, fmt=fmt
                    )
                    print(f"round {number}, {mode}, {fmt}: {result}", flush=True)
    finally:
        if "avro" in formats:
            subprocess.run([*devtools, "registry", "stop"], cwd=project, check=False)
        subprocess.run([*devtools, "broker", "stop"], cwd=project, check=False)


def measure(  # noqa: PLR0914 (one run, top to bottom)
    args, project: Path, python: Path, classpath: str, payloads, *, mode, fmt="json"
) -> str:
    """One run of the realtime pipeline in ``mode`` on ``fmt`` messages; its
    figures, as a line."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    suffix = uuid.uuid4().hex[:8]
    topics = {name: f"bench-{name}-{suffix}" for name in ("trips", "ok", "rejected")}
    admin = KafkaAdminClient(bootstrap_servers=SERVERS)
    admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics.values()])
    admin.close()
    registry_url = getattr(args, "registry_url", None) if fmt == "avro" else None
    env = write_environment(
        project, topics, suffix, mode, args.spark_conf, registry_url
    )
    if args.producer == "python":
        payloads = framed_payloads(
            python, project, payloads, topics["trips"], registry_url
        )

    # librdkafka's consumer (confluent-kafka): kafka-python decodes each
    # record in Python, and on these two cores fell seconds behind whenever
    # Spark sent a burst (after the warm-up and after each checkpoint), which
    # counted as latency. Assigned, not subscribed: no group to join.
    consumer = Consumer(
        {
            "bootstrap.servers": SERVERS,
            "group.id": f"bench-{suffix}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 5,
        }
    )
    consumer.assign(
        [
            TopicPartition(topics[name], partition, OFFSET_BEGINNING)
            for name in ("ok", "rejected")
            for partition in range(PARTITIONS)
        ]
    )
    # Read at, value, sent at: decoded after the run, so that the reader keeps
    # up (JSON in this loop would be counted as latency).
    raw: list[tuple[float, bytes, int]] = []
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set():
            # One at a time: a batch would wait to fill up.
            record = consumer.poll(0.05)
            if record is None:
                continue
            if record.error():
                raise RuntimeError(record.error())
            raw.append((time.time(), record.value(), record.timestamp()[1]))

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()

    ui_port = free_port()
    params = [
        f"{name}={value}"
        for name, value in (
            ("realtime_checkpoint_interval", args.checkpoint_interval),
            # The UI's jobs give the pause at each checkpoint.
            ("spark_ui_port", ui_port),
        )
        if value
    ] + args.params
    log_path = args.workdir / f"realtime-{suffix}.log"
    # `kedro run` with Spark's instruments read inside it (spark_instruments.py).
    instruments_path = args.workdir / f"realtime-{suffix}.instruments.json"
    kedro = [python, HERE / "spark_instruments.py", "--out", instruments_path, "--"]
    if args.no_instruments:
        kedro = [python.parent / "kedro"]
    progress = project / f"data/bench-{suffix}/streams/progress.jsonl"
    if args.run == "handwritten":
        progress = args.workdir / f"realtime-{suffix}.progress.jsonl"
        command = [
            python,
            HERE / "handwritten_realtime.py",
            project,
            env,
            topics["trips"],
            args.workdir / f"realtime-{suffix}.checkpoint",
            *("--topics", f"{topics['ok']},{topics['rejected']}"),
            *("--interval", args.checkpoint_interval or "2 minutes"),
            *("--ui-port", str(ui_port), "--progress", progress),
        ]
    else:
        command = [*kedro, "run", "--env", env, "--pipelines", "realtime"] + (
            ["--params", ",".join(params)] if params else []
        )
    with log_path.open("w") as log:
        run = subprocess.Popen(
            command,
            cwd=project,
            env={**os.environ, "KEDRO_DISABLE_TELEMETRY": "true", "COLUMNS": "250"},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    launched = time.monotonic()
    try:
        while "Started streaming query" not in log_path.read_text():
            if run.poll() is not None:
                sys.exit(log_path.read_text()[-3000:])
            time.sleep(0.05)
        # What a restart costs before the query reads: records sent meanwhile
        # wait, and are not counted below.
        started_after = time.monotonic() - launched
        count = args.rate * args.seconds
        if args.producer == "python":
            produce_paced(topics["trips"], payloads, count, args.rate)
        else:
            produce(classpath, topics["trips"], payloads, count, args.rate)
        deadline = time.monotonic() + 60
        while len(raw) < count and time.monotonic() < deadline:
            time.sleep(0.5)
        jobs = spark_jobs(f"http://127.0.0.1:{ui_port}")
        stages = stage_launches(
            f"http://127.0.0.1:{ui_port}",
            [max(j["stageIds"]) for j in long_jobs(jobs, "trip_messages").values()],
        )
    finally:
        stop.set()
        reader.join()
        consumer.close()
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=120)
        # About 0.6 GB a run on the broker's disk, read by now.
        admin = KafkaAdminClient(bootstrap_servers=SERVERS)
        admin.delete_topics(list(topics.values()))
        admin.close()
    # No progress line before the first checkpoint: a run shorter than one
    # interval has none.
    batches = [
        json.loads(line)
        for line in (progress.read_text() if progress.exists() else "").splitlines()
    ]
    produced_at = (
        avro_timestamps(registry_url, [value for _, value, _ in raw])
        if registry_url
        else [epoch(json.loads(value)["kafka_timestamp"]) for _, value, _ in raw]
    )
    received = [
        (read_at, produced, sent_at / 1000)
        for (read_at, _, sent_at), produced in zip(raw, produced_at, strict=True)
    ]
    with (args.workdir / f"realtime-{suffix}.latencies.csv").open("w") as out:
        out.write("produced_at,read_at,spark_sent_at\n")
        out.writelines(f"{p:.3f},{r:.3f},{s:.3f}\n" for r, p, s in received)
    instruments = (
        json.loads(instruments_path.read_text()) if instruments_path.exists() else None
    )
    breakdown = pauses(jobs, stages, batches, instruments, "trip_messages")
    return (
        f"query started {started_after:.1f} s after `kedro run`; "
        + report(received, count, batches, jobs)
        + "".join(f"\n  {line}" for line in pause_lines(breakdown))
    )


def write_environment(  # noqa: PLR0917
    project: Path,
    topics: dict,
    suffix: str,
    mode: str,
    spark_conf: list[str],
    registry_url: str | None = None,
) -> str:
    """conf/kafka as shipped, on the run's own topics and tables; the sink in
    micro-batches when ``mode`` says so; ``spark_conf`` (``key=value``) over
    its spark.yml; Avro in and out through the registry at ``registry_url``."""
    env = f"bench-{suffix}"
    env_dir = project / "conf" / env
    env_dir.mkdir()
    kafka_spark_yml(project, env_dir, spark_conf)
    for name in ("catalog.yml", "globals.yml", "credentials.yml"):
        text = (project / "conf/kafka" / name).read_text()
        text = text.replace("taxi-trips-checked", topics["ok"])
        text = text.replace("taxi-trips-rejected", topics["rejected"])
        text = text.replace(
            " trips_topic: taxi-trips", f" trips_topic: {topics['trips']}"
        )
        text = text.replace("output_root: data/kafka", f"output_root: data/{env}")
        if mode == "micro-batch" and name == "catalog.yml":
            shipped = "    trigger:\n      realTime: "
            start = text.index(shipped)
            end = text.index("\n", start + len(shipped))
            text = text[:start] + f"    trigger: {{{MICRO_BATCH}}}" + text[end:]
        if registry_url and name == "globals.yml":
            text = re.sub(
                r"(?m)^  schema_registry_url: .*$",
                f"  schema_registry_url: {registry_url}",
                text,
            )
            text += "".join(
                f"  {option}:\n    schema_registry_url: ${{kafka.schema_registry_url}}\n"
                for option in ("trips_avro", "messages_avro")
            )
        (env_dir / name).write_text(text)
    return env


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def avro_timestamps(registry_url: str, values: list[bytes]) -> list[float]:
    """Each output message's ``kafka_timestamp`` (its input's), decoded from
    Avro with fastavro, as epoch seconds."""
    import io
    from urllib.request import urlopen

    import fastavro

    readers: dict[int, object] = {}
    stamps = []
    for value in values:
        schema_id = int.from_bytes(value[1:5], "big")
        if schema_id not in readers:
            with urlopen(f"{registry_url}/schemas/ids/{schema_id}") as answer:
                schema = json.loads(json.load(answer)["schema"])
            readers[schema_id] = fastavro.parse_schema(schema)
        record = fastavro.schemaless_reader(io.BytesIO(value[5:]), readers[schema_id])
        stamps.append(record["kafka_timestamp"].timestamp())
    return stamps


def epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def report(received: list, sent: int, batches: list[dict], jobs: list[dict]) -> str:
    """The run's figures, phase by phase (``latency.phase_lines``): as the
    consumer read them, and Spark's share; then Spark's pause at each
    checkpoint, from its jobs."""
    if not received:
        return f"{sent:,} messages in, none out"
    ended = [b for b in batches if b["query"] == "trip_messages"]
    # Real-Time Mode's batch ends are its checkpoints; micro-batches end
    # every moment, and have none to report apart.
    real_time = 0 < len(ended) <= 50
    ends = (
        [epoch(b["time"]) + b["duration_ms"] / 1000 for b in ended] if real_time else []
    )
    read = [
        (produced, 1000 * (read_at - produced)) for read_at, produced, _ in received
    ]
    spark = [
        (produced, 1000 * (sent_at - produced)) for _, produced, sent_at in received
    ]
    parts = [f"{sent:,} messages in, {len(received):,} out"]
    parts += [f"read: {line}" for line in phase_lines(read, ends)]
    parts += [f"Spark's share: {line}" for line in phase_lines(spark, ends)[:3]]
    first = min(produced for produced, _ in read)
    seconds: dict[int, list[float]] = {}
    for produced, ms in read:
        if produced < first + 20:
            seconds.setdefault(int(produced - first), []).append(ms)
    parts.append(
        "first 20 s, p50 by second produced: "
        + " ".join(
            f"{quantile(sorted(v), 0.5):.0f}" for _, v in sorted(seconds.items())
        )
    )
    # How fast the start's backlog drained: what the query could read at
    # best, once warm, and how long it read more than was sent.
    first_read = min(read_at for read_at, _, _ in received)
    tens = Counter(int((read_at - first_read) // 10) for read_at, _, _ in received)
    parts.append(
        "read per second, by 10 s from the first read: "
        + ", ".join(f"{tens[i] / 10:,.0f}" for i in range(min(16, max(tens) + 1)))
    )
    return "\n  ".join(parts)


if __name__ == "__main__":
    main()
