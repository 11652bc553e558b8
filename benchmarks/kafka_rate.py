"""Continuous mode at a real event rate: Kafka in, bronze_trips out.

Starts the project's local broker (``kedro streams broker start``), runs
``kedro run --env kafka --params trigger_interval=1 second`` (the default
pipelines, ingest and aggregate, unless ``--pipelines`` says otherwise), and
produces TLC-shaped trips at ``--rate`` messages/s for ``--seconds``, from
when its queries run (``--produce-from launch``: from ``kedro run`` on). It
samples the backlog (messages in the topic that bronze_trips has not
committed) every few seconds, and measures, for every message, the time from
its Kafka timestamp (set when produced) to the commit of the micro-batch that
wrote it to bronze_trips (the batch's entry in the sink's ``_spark_metadata``
log, from which on readers see it).

    python benchmarks/kafka_rate.py [--rate 5000] [--seconds 150]
                                    [--produce-from queries|launch]
                                    [--spark-conf KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.request import urlopen

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from batch import bench_project, kafka_spark_yml
from latency import phase_lines
from trips import trips

TOPIC = "bench-trips"
PARTITIONS = 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=5000, help="messages per second")
    parser.add_argument("--seconds", type=int, default=150, help="how long to produce")
    parser.add_argument(
        "--params",
        default="",
        help='more `kedro run --params`, e.g. "trigger_interval=2 seconds"',
    )
    parser.add_argument(
        "--pipelines",
        default="__default__",
        help="what `kedro run` runs (ingest alone: ingest)",
    )
    parser.add_argument(
        "--produce-from",
        choices=("queries", "launch"),
        default="queries",
        help="when producing starts: once the queries run (default), or with "
        "`kedro run` (its start-up counted as latency)",
    )
    add_spark_conf(parser)
    parser.add_argument(
        "--workdir", type=Path, default=Path("/tmp/kedro-streaming-bench")
    )
    args = parser.parse_args()

    # The project alone: the trips are produced to Kafka, not landed as files.
    project, python = bench_project(args.workdir)
    tables = project / "data/bench-kafka"
    write_environment(project, tables, args.spark_conf)

    lines = [
        line.encode()
        for line in trips(args.rate * args.seconds)
        .to_json(orient="records", lines=True)
        .splitlines()
    ]
    broker = [python, "-m", "kedro_streaming.devtools", "broker"]
    subprocess.run([*broker, "start"], cwd=project, check=True)
    run = None
    try:
        from kafka import KafkaConsumer, TopicPartition

        new_topic()

        # Kafka's own load generator (Java), paced at --rate: a Python
        # producer on these two cores falls behind and its queue would be
        # counted as latency.
        payloads = args.workdir / "payloads.txt"
        payloads.write_bytes(b"\n".join(lines))
        start_producer = functools.partial(
            subprocess.Popen,
            load_generator(
                python, project, args.rate * args.seconds, args.rate, payloads
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        consumer = KafkaConsumer(bootstrap_servers="localhost:9092")
        partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        launch = args.produce_from == "launch"
        if launch:
            # A restart as users live it: the producer is already sending.
            producer = start_producer()
            while not sum(consumer.end_offsets(partitions).values()):
                time.sleep(0.05)
            started = time.monotonic()
        log_path = args.workdir / "kafka-run.log"
        run, running_after = start_run(python, project, args, log_path)
        if not launch:
            producer, started = start_producer(), time.monotonic()
        bronze = tables / "02_intermediate/bronze_trips"
        checkpoint = tables / "checkpoints/bronze_trips"
        samples = []
        while producer.poll() is None:
            produced = sum(consumer.end_offsets(partitions).values())
            samples.append(
                (time.monotonic() - started, produced, committed_offsets(checkpoint))
            )
            time.sleep(5)
        report = producer.stdout.read().strip().splitlines()[-1]
        produce_seconds = time.monotonic() - started
        sent = sum(consumer.end_offsets(partitions).values())
        deadline = time.monotonic() + 120
        while committed_offsets(checkpoint) < sent and time.monotonic() < deadline:
            time.sleep(1)
        drained = time.monotonic() - started - produce_seconds
        samples.append(
            (time.monotonic() - started, sent, committed_offsets(checkpoint))
        )
        consumer.close()
        # The run's Prometheus endpoint (conf/base/streaming.yml), before it stops.
        with urlopen("http://127.0.0.1:9464/metrics", timeout=10) as response:
            scrape = response.read().decode()
        (args.workdir / "metrics.txt").write_text(scrape)
    finally:
        if run and run.poll() is None:
            run.send_signal(signal.SIGTERM)
            run.wait(timeout=120)
        subprocess.run([*broker, "stop"], cwd=project, check=False)

    stamped = commit_latencies(bronze)
    print(
        f"produced {sent:,} messages in {produce_seconds:.1f} s; the producer: {report}"
    )
    print(f"the queries ran {running_after:.1f} s after `kedro run`")
    print(
        "backlog (s since start: messages produced but not yet committed to bronze_trips):"
    )
    print(
        "  "
        + ", ".join(f"{at:.0f}: {produced - done:,}" for at, produced, done in samples)
    )
    print(f"backlog drained {drained:.1f} s after the producer stopped")
    print(f"produce -> bronze commit, {sent:,} in, {len(stamped):,} out:")
    for line in phase_lines([(at, 1000 * latency) for at, latency in stamped]):
        print(f"  {line}")
    print(f"Prometheus, scraped before the run stopped ({args.workdir}/metrics.txt):")
    for line in scrape.splitlines():
        if 'query="bronze_trips"' in line and "_bucket" not in line:
            print(f"  {line}")


def add_spark_conf(parser: argparse.ArgumentParser) -> None:
    """``--spark-conf KEY=VALUE``, repeatable: settings over conf/kafka/spark.yml."""
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting over conf/kafka/spark.yml (repeatable)",
    )


def write_environment(project: Path, tables: Path, spark_conf: list[str]) -> None:
    """conf/bench-kafka: conf/kafka as shipped, on a topic and tables of the
    benchmark's own (``tables``, emptied), with ``spark_conf`` over its
    spark.yml."""
    env_dir = project / "conf/bench-kafka"
    for path in (tables, env_dir):
        subprocess.run(["rm", "-rf", str(path)], check=True)
    env_dir.mkdir()
    for name in ("catalog.yml", "globals.yml", "credentials.yml"):
        text = (project / "conf/kafka" / name).read_text()
        text = text.replace("trips_topic: taxi-trips", f"trips_topic: {TOPIC}")
        text = text.replace("output_root: data/kafka", "output_root: data/bench-kafka")
        (env_dir / name).write_text(text)
    kafka_spark_yml(project, env_dir, spark_conf)


def start_run(python: Path, project: Path, args, log_path: Path):
    """``kedro run`` on the benchmark's environment, logging to ``log_path``;
    the process and the seconds until its queries ran."""
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "true", "COLUMNS": "250"}
    params = ",".join(filter(None, ["trigger_interval=1 second", args.params]))
    with log_path.open("w") as log:
        run = subprocess.Popen(
            [python.parent / "kedro", "run", "--env", "bench-kafka"]
            + ["--pipelines", args.pipelines, "--params", params],
            cwd=project,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    launched = time.monotonic()
    while "Streaming queries running" not in log_path.read_text():
        if run.poll() is not None:
            sys.exit(log_path.read_text()[-3000:])
        time.sleep(0.05)
    return run, time.monotonic() - launched


def new_topic() -> None:
    """The benchmark's topic, created anew (empty) on the local broker."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers="localhost:9092")
    if TOPIC in admin.list_topics():
        admin.delete_topics([TOPIC])
        time.sleep(3)
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
    admin.close()


def load_generator(
    python: Path, project: Path, records: int, rate: int, payloads: Path
) -> list:
    """Kafka's ProducerPerformance: ``records`` lines of ``payloads`` (picked
    at random) to the topic at ``rate`` messages/s."""
    return [
        "java",
        "-cp",
        perf_classpath(python, project),
        "org.apache.kafka.tools.ProducerPerformance",
        *("--topic", TOPIC, "--num-records", str(records)),
        *("--throughput", str(rate), "--payload-file", str(payloads)),
        "--producer-props",
        "bootstrap.servers=localhost:9092",
        "acks=1",
        "linger.ms=5",
    ]


def perf_classpath(python: Path, project: Path) -> str:
    """Kafka's jars as the project's local broker runs them, plus kafka-tools."""
    code = (
        "from kedro_streaming.devtools.broker import KAFKA_VERSION as v, cache_root as c; "
        "print(v); print(c() / v / 'libs')"
    )
    version, libs = subprocess.run(
        [python, "-c", code],
        cwd=project,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    artifacts = [
        f"org.apache.kafka:kafka-tools:{version}",
        "net.sourceforge.argparse4j:argparse4j:0.7.0",
    ]
    for artifact in artifacts:
        subprocess.run(
            ["mvn", "-q", "dependency:get", f"-Dartifact={artifact}"], check=True
        )
    m2 = Path.home() / ".m2/repository"
    jars = [
        m2 / f"org/apache/kafka/kafka-tools/{version}/kafka-tools-{version}.jar",
        m2 / "net/sourceforge/argparse4j/argparse4j/0.7.0/argparse4j-0.7.0.jar",
    ]
    return ":".join([*map(str, jars), f"{libs}/*"])


def committed_offsets(checkpoint: Path) -> int:
    """Messages the query has committed: the offsets of its last committed batch."""
    commits = (
        [int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")]
        if checkpoint.is_dir()
        else []
    )
    if not commits:
        return 0
    offsets = (checkpoint / "offsets" / str(max(commits))).read_text().splitlines()[-1]
    return sum(json.loads(offsets)[TOPIC].values())


def commit_latencies(bronze: Path) -> list[tuple[float, float]]:
    """Per row: when it was produced, and its batch's commit time in the sink
    log minus that (seconds)."""
    import pandas as pd

    log = bronze / "_spark_metadata"
    entries = sorted(
        (p for p in log.iterdir() if p.name[0].isdigit()),
        key=lambda p: int(p.name.split(".")[0]),
    )
    seen: set[str] = set()
    latencies: list[tuple[float, float]] = []
    for entry in entries:
        files = {
            json.loads(line)["path"] for line in entry.read_text().splitlines()[1:]
        } - seen
        seen |= files
        committed_at = pd.Timestamp(entry.stat().st_mtime, unit="s", tz="UTC")
        for path in files:
            stamps = pd.read_parquet(
                path.removeprefix("file://"), columns=["kafka_timestamp"]
            )
            stamps = pd.to_datetime(stamps.kafka_timestamp, utc=True)
            produced = (stamps - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
            latencies += zip(produced, (committed_at - stamps).dt.total_seconds())
    return latencies


if __name__ == "__main__":
    main()
