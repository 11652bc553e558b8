"""A deploy's downtime: ``kedro run`` against the same query by hand, side by side.

The project's ``bronze_trips`` from Kafka (``kedro run --env bench-kafka
--pipelines ingest``, a micro-batch every second) and the same query written
by hand (``handwritten_stream.py``: the project's nodes and rules, no Kedro),
each with its own checkpoint, while Kafka's own load generator produces
TLC-shaped trips at ``--rate`` messages/s throughout. Round after round,
alternating, each is run until it has caught up, then deployed again as a
user would: SIGTERM, and at once the same command. Per deploy:

- ``stop``: from SIGTERM to the old process's exit;
- ``launch to first commit``: from the new process's launch to the first
  micro-batch it commits (its entry in the checkpoint's ``commits``), the
  figure issue 70 holds to 1.3x the hand-written script's;
- ``query started``: from launch to the query's start (``kedro run``'s
  "Streaming queries running", the script's own line);
- ``commit gap``: from the old process's last commit to the new one's first,
  what a reader of the table sees.

With ``--share-classes`` the script maps the archive of Spark's classes
that the project's runs record and map (class-data sharing), which shows
what the rest of the difference costs.

    python benchmarks/restart.py [--rounds 3] [--rate 5000] [--share-classes]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from batch import bench_project, class_archive
from kafka_rate import (
    PARTITIONS,
    TOPIC,
    committed_offsets,
    load_generator,
    new_topic,
    write_environment,
)
from trips import trips

ENV = "bench-kafka"
STARTED = {"kedro": "Streaming queries running", "by hand": "query started"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=5000, help="messages per second")
    parser.add_argument(
        "--workdir", type=Path, default=Path("/tmp/kedro-streaming-bench")
    )
    parser.add_argument(
        "--share-classes",
        action="store_true",
        help="the script maps the project's archive of Spark's classes",
    )
    args = parser.parse_args()
    project, python = bench_project(args.workdir)
    archive = class_archive(project, python) if args.share_classes else None
    if args.share_classes and not (archive and archive.exists()):
        sys.exit("No class archive yet: run batch.py first, which records it.")
    tables = project / "data" / ENV
    write_environment(project, tables, [])
    by_hand_out = args.workdir / "restart-by-hand"
    subprocess.run(["rm", "-rf", str(by_hand_out)], check=True)
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "true", "COLUMNS": "250"}
    commands = {
        "by hand": [python, HERE / "handwritten_stream.py", project, by_hand_out]
        + ["--env", ENV, "--interval", "1 second"]
        + (["--class-archive", archive] if archive else []),
        "kedro": [python.parent / "kedro", "run", "--env", ENV, "--pipelines"]
        + ["ingest", "--params", "trigger_interval=1 second"],
    }
    checkpoints = {
        "by hand": by_hand_out / "checkpoints/bronze",
        "kedro": tables / "checkpoints/bronze_trips",
    }
    broker = [python, "-m", "kedro_streaming.devtools", "broker"]
    subprocess.run([*broker, "start"], cwd=project, check=True)
    producer = None
    deploys: dict[str, list[dict]] = {name: [] for name in commands}
    try:
        producer, produced = start_producer(args, project, python)
        for round_number in range(1, args.rounds + 1):
            for name, command in commands.items():
                run = Run(command, project, env, args.workdir / f"restart-{name}.log")
                run.caught_up(checkpoints[name], produced, args.rate)
                deploy = run.deployed_again(checkpoints[name], STARTED[name])
                deploys[name].append(deploy)
                print(f"round {round_number} {name:7s} " + line(deploy), flush=True)
    finally:
        if producer and producer.poll() is None:
            producer.terminate()
        subprocess.run([*broker, "stop"], cwd=project, check=False)
    print(f"\n{args.rate:,} messages/s, {os.cpu_count()} cores; medians:")
    for name, runs in deploys.items():
        medians = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(f"{name:7s} {line(medians)}")
    hand, ours = (
        statistics.median(r["first commit"] for r in deploys[n])
        for n in ("by hand", "kedro")
    )
    print(f"launch to first commit, kedro / by hand: {ours / hand:.2f}")


def line(deploy: dict) -> str:
    return ", ".join(f"{key} {value:.2f} s" for key, value in deploy.items())


class Run:
    """One process of a command (a run of the query), its output in ``log``."""

    def __init__(self, command: list, project: Path, env: dict, log: Path) -> None:
        self.command, self.project, self.env, self.log = command, project, env, log
        self.launched = time.time()
        self.process = self._launch()

    def _launch(self) -> subprocess.Popen:
        with self.log.open("w") as out:
            return subprocess.Popen(
                [str(part) for part in self.command],
                cwd=self.project,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def caught_up(self, checkpoint: Path, produced, rate: int) -> None:
        """Waits until this run has committed a batch and all but 2 s of what
        was sent."""
        deadline = time.monotonic() + 600
        first = latest_commit(checkpoint)[0]
        while (
            latest_commit(checkpoint)[0] == first
            or committed_offsets(checkpoint) < produced() - 2 * rate
        ):
            self._alive()
            if time.monotonic() > deadline:
                sys.exit(f"{self.command} did not catch up in 600 s")
            time.sleep(0.5)

    def deployed_again(self, checkpoint: Path, started_line: str) -> dict:
        """SIGTERM, then the same command at once: the deploy's times."""
        signalled = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=120)
        stopped = time.monotonic() - signalled
        before, last_commit = latest_commit(checkpoint)
        self.launched = time.time()
        self.process = self._launch()
        query_started = None
        while (commit := latest_commit(checkpoint))[0] == before:
            self._alive()
            if query_started is None and started_line in self.log.read_text():
                query_started = time.time() - self.launched
            time.sleep(0.02)
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=120)
        return {
            "stop": stopped,
            "query started": query_started or float("nan"),
            "first commit": commit[1] - self.launched,
            "commit gap": commit[1] - last_commit,
        }

    def _alive(self) -> None:
        if self.process.poll() is not None:
            sys.exit(f"{self.command} ended:\n{self.log.read_text()[-3000:]}")


def latest_commit(checkpoint: Path) -> tuple[int, float]:
    """The query's last committed batch and when it was committed (-1, 0.0: none)."""
    commits = checkpoint / "commits"
    ids = [int(p.name) for p in commits.glob("[0-9]*")] if commits.is_dir() else []
    if not ids:
        return -1, 0.0
    return max(ids), (commits / str(max(ids))).stat().st_mtime


def start_producer(args, project: Path, python: Path):
    """Kafka's own load generator at ``args.rate`` on a new topic, for as long
    as the benchmark runs; and a function giving what it has produced."""
    from kafka import KafkaConsumer, TopicPartition

    new_topic()
    payloads = args.workdir / "payloads.txt"
    payloads.write_text(
        trips(100_000).to_json(orient="records", lines=True).strip() + "\n"
    )
    # For longer than the benchmark runs; stopped at its end.
    records = args.rate * 7200
    producer = subprocess.Popen(
        load_generator(python, project, records, args.rate, payloads),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    consumer = KafkaConsumer(bootstrap_servers="localhost:9092")
    partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    return producer, lambda: sum(consumer.end_offsets(partitions).values())


if __name__ == "__main__":
    main()
