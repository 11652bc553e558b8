"""Hours, not minutes: the example's stateful queries at a steady rate, minute by minute.

Starts the project's local broker and ``kedro run --env bench-kafka`` with
the example's stateful queries: the default pipelines (``bronze_trips``,
then the quarantine and the hourly windows per borough over it) and
``dedupe`` (each trip's message once, by its origin, within 10 minutes);
``--pipelines`` for others. A micro-batch every ``--trigger``; TLC-shaped
trips at ``--rate`` messages/s for ``--minutes`` (librdkafka's producer,
paced, in a process of its own). Each message is shaped as the
``realtime`` pipeline writes it, the trip and its origin (``kafka_topic``,
``kafka_partition``, ``kafka_offset``, ``kafka_timestamp``), and every
``COPY_EVERY``-th is a copy of one sent ``COPY_BEHIND`` before, as an
at-least-once sink's retry would send it; ``dedupe`` reads the same topic.
Event time moves on for the whole run: the producer cycles through 100,000
template trips and shifts each cycle's datetimes past the one before, so
windows keep closing and state keeps turning over, as in a real feed.

Every 10 s it samples the JVM (driver and executors under ``local[2]``):
its resident memory (``/proc``) and its heap in use (``jcmd GC.heap_info``),
and the Python driver's resident memory. One line per minute: the largest
resident memories, the smallest heap in use (the floor the collections
leave), and from the run's progress log each query's batches, their p95
duration and its state rows. At the end: in = out (the messages produced against
``bronze_trips``' committed offsets and its rows, and the messages less
their copies against ``unique_trips``' rows), and over the
last ``--judge`` minutes each figure's smallest and largest value, and how
far apart (issue 70 holds memory to 5 %). The minutes go to
``soak-minutes.json`` in ``--workdir``.

With ``--profile-at 5,50``, the minute after each of those minutes is
profiled (``thread_cpu.py``): each process's CPU by thread group (the run's
JVM, its Python driver, the broker, the producer), and a Flight Recording
of the JVM (``soak-minute-<m>.jfr`` in ``--workdir``). The recording's
start makes the JIT recompile: on two cores the next minute's batches are
slower (p95 about 10 s at minute 5), so leave those minutes out of figures.

    python benchmarks/soak.py [--minutes 60] [--rate 5000] [--trigger "5 seconds"]
                              [--pipelines __default__,dedupe] [--judge 30]
                              [--spark-conf KEY=VALUE] [--profile-at 5,50]
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from batch import bench_project
from jvm_memory import jvm_memory
from kafka_rate import (
    TOPIC,
    add_spark_conf,
    committed_offsets,
    new_topic,
    start_run,
    write_environment,
)
from producers import PACING
from thread_cpu import describe, profile_window
from trips import trips

# One message in COPY_EVERY is a copy of the one sent COPY_BEHIND before.
COPY_EVERY, COPY_BEHIND = 200, 100

# Its own process, so that sampling here does not slow it down: librdkafka
# sends; Python paces, and shifts each cycle of templates past the last.
STAMPED_PRODUCER = (
    """
import json, sys, time
from datetime import datetime, timedelta, timezone
from confluent_kafka import Producer
servers, topic, path, count, rate, every, behind = sys.argv[1:4] + [
    int(a) for a in sys.argv[4:8]
]
templates = [json.loads(line) for line in open(path)]
times = ("lpep_pickup_datetime", "lpep_dropoff_datetime")
parsed = [[datetime.fromisoformat(t[k]) for k in times] for t in templates]
first = min(p for p, _ in parsed)
span = max(d for _, d in parsed) - first + timedelta(hours=1)
producer = Producer({"bootstrap.servers": servers, "acks": "1", "linger.ms": 5})
started = datetime.now(timezone.utc)


def payload(n):
    if n % every == every - 1:
        n -= behind  # a copy: the same trip from the same origin
    cycle, index = divmod(n, len(templates))
    trip = dict(templates[index])
    for key, at in zip(times, parsed[index]):
        trip[key] = (at + cycle * span).strftime("%Y-%m-%d %H:%M:%S")
    # Where the trip entered, as the realtime pipeline names it: its time is
    # when it was due to be sent, so a copy keeps its original's.
    entered = started + timedelta(seconds=n / rate)
    trip.update(kafka_topic="soak-source", kafka_partition=n % 2, kafka_offset=n,
                kafka_timestamp=entered.isoformat(timespec="milliseconds"))
    return json.dumps(trip).encode()
"""
    + PACING
    + "print(sent)\n"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=int, default=60)
    parser.add_argument("--rate", type=int, default=5000, help="messages per second")
    parser.add_argument("--trigger", default="5 seconds")
    parser.add_argument("--pipelines", default="__default__,dedupe")
    parser.add_argument(
        "--judge", type=int, default=30, help="the last minutes held to 5 %%"
    )
    add_spark_conf(parser)
    parser.add_argument(
        "--profile-at",
        default="",
        metavar="MINUTES",
        help="comma-separated minutes after which one minute is profiled",
    )
    parser.add_argument(
        "--workdir", type=Path, default=Path("/tmp/kedro-streaming-bench")
    )
    args = parser.parse_args()
    args.params = f"trigger_interval={args.trigger}"
    project, python = bench_project(args.workdir)
    tables = project / "data/bench-kafka"
    write_environment(project, tables, args.spark_conf)
    # dedupe reads the trips' topic, whose messages carry their origin.
    catalog = project / "conf/bench-kafka/catalog.yml"
    catalog.write_text(
        catalog.read_text().replace(
            "subscribe: ${globals:kafka.checked_trips_topic},"
            "${globals:kafka.rejected_trips_topic}",
            f"subscribe: {TOPIC}",
        )
    )
    templates = args.workdir / "soak-templates.jsonl"
    templates.write_text(trips(100_000).to_json(orient="records", lines=True))
    broker = [python, "-m", "kedro_streaming.devtools", "broker"]
    subprocess.run([*broker, "start"], cwd=project, check=True)
    run = None
    minutes: list[dict] = []
    try:
        new_topic()
        run, running_after = start_run(
            python, project, args, args.workdir / "soak-run.log"
        )
        count = args.rate * 60 * args.minutes
        producer = subprocess.Popen(
            [sys.executable, "-c", STAMPED_PRODUCER, "localhost:9092", TOPIC]
            + [str(templates), str(count), str(args.rate)]
            + [str(COPY_EVERY), str(COPY_BEHIND)],
            stdout=subprocess.PIPE,
            text=True,
        )
        progress = tables / "streams/progress.jsonl"
        profile = Profiler(args, project, run, producer)
        minutes = sample_minutes(run, producer, progress, profile)
        sent = int(producer.stdout.read().split()[-1])
        # Every query over the topic has committed the last message before
        # the stop: a batch the stop cuts short is not in its sink yet.
        readers = [tables / "checkpoints/bronze_trips"]
        if "dedupe" in args.pipelines:
            readers.append(tables / "checkpoints/unique_trips")
        deadline = time.monotonic() + 300
        while (
            min(committed_offsets(c) for c in readers) < sent
            and time.monotonic() < deadline
        ):
            time.sleep(2)
        committed = committed_offsets(readers[0])
    finally:
        if run and run.poll() is None:
            run.send_signal(signal.SIGTERM)
            run.wait(timeout=120)
        subprocess.run([*broker, "stop"], cwd=project, check=False)
    rows = parquet_rows(tables / "02_intermediate/bronze_trips")
    copies = sent // COPY_EVERY
    (args.workdir / "soak-minutes.json").write_text(json.dumps(minutes, indent=1))
    print(f"queries running {running_after:.1f} s after `kedro run`")
    report(minutes, args.judge)
    print(
        f"in = out: {sent:,} produced, {committed:,} committed by bronze_trips "
        f"(its offsets), {rows:,} rows in it"
    )
    if "dedupe" in args.pipelines:
        unique = parquet_rows(tables / "02_intermediate/unique_trips")
        print(
            f"{sent - copies:,} produced less their {copies:,} copies, "
            f"{unique:,} rows in unique_trips"
        )


def sample_minutes(run, producer, progress: Path, profile) -> list[dict]:
    """Per minute while ``producer`` runs: memory and each query's batches."""
    minutes: list[dict] = []
    started, read_to = time.monotonic(), 0
    samples: list[tuple[float, float, float, float]] = []
    while producer.poll() is None:
        if run.poll() is not None:
            sys.exit("kedro run ended before the producer")
        samples.append(memory(run.pid))
        time.sleep(10)
        if time.monotonic() - started >= 60 * (len(minutes) + 1):
            records, read_to = new_records(progress, read_to)
            minutes.append(minute(len(minutes) + 1, samples, records))
            print(line(minutes[-1]), flush=True)
            profile.after(len(minutes))
            samples = []
    profile.join()
    return minutes


class Profiler:
    """Profiles the minute after each of ``--profile-at``'s, beside the
    sampling (a thread: the window is a minute long)."""

    def __init__(self, args, project: Path, run, producer) -> None:
        self._at = {int(m) for m in args.profile_at.split(",") if m}
        self._workdir = args.workdir
        self._broker = project / "data/kafka-broker/broker.json"
        self._run, self._producer = run, producer
        self._threads: list[threading.Thread] = []

    def after(self, minute: int) -> None:
        if minute in self._at:
            thread = threading.Thread(target=self._window, args=(minute,))
            thread.start()
            self._threads.append(thread)

    def _window(self, minute: int) -> None:
        java = next(c for c in children(self._run.pid) if name(c) == "java")
        pids = {"jvm": java, "kedro (Python)": self._run.pid}
        pids["producer"] = self._producer.pid
        pids["broker"] = json.loads(self._broker.read_text())["pid"]
        jfr = self._workdir / f"soak-minute-{minute}.jfr"
        window = profile_window(pids, 60, jfr)
        print(f"CPU, minute {minute} to {minute + 1}:\n{describe(window)}", flush=True)

    def join(self) -> None:
        for thread in self._threads:
            thread.join()


def memory(pid: int) -> tuple[float, float, float, float]:
    """MiB: the JVM's resident memory, its heap in use, its resident memory
    outside the heap and files (``jvm_memory``), the Python driver's
    resident memory."""
    java = next((child for child in children(pid) if name(child) == "java"), None)
    jvm = jvm_memory(java) if java else {}
    return (
        jvm.get("vmrss_kb", 0) / 1024,
        jvm.get("heap_used_kb", 0) / 1024,
        jvm.get("other_anon_kb", 0) / 1024,
        rss(pid),
    )


def children(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        path = Path(f"/proc/{parent}/task/{parent}/children")
        kids = [int(k) for k in path.read_text().split()] if path.exists() else []
        found += kids
        todo += kids
    return found


def name(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def rss(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024


def new_records(progress: Path, read_to: int) -> tuple[list[dict], int]:
    if not progress.exists():
        return [], read_to
    with progress.open() as log:
        log.seek(read_to)
        text = log.read()
    complete = text[: text.rfind("\n") + 1]
    return [json.loads(r) for r in complete.splitlines()], read_to + len(
        complete.encode()
    )


def minute(number: int, samples: list, records: list[dict]) -> dict:
    queries: dict[str, dict] = {}
    for record in records:
        query = queries.setdefault(record["query"], {"ms": [], "state": None})
        query["ms"].append(record["duration_ms"])
        query["state"] = record.get("state_rows")
    return {
        "minute": number,
        "jvm_rss": max(s[0] for s in samples),
        "heap_floor": min(s[1] for s in samples),
        "other_anon": max(s[2] for s in samples),
        "python_rss": max(s[3] for s in samples),
        "queries": {
            q: {
                "batches": len(v["ms"]),
                "p95_ms": p95(v["ms"]),
                "state_rows": v["state"],
            }
            for q, v in queries.items()
        },
    }


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] if values else 0


def line(m: dict) -> str:
    queries = "; ".join(
        f"{q} {v['batches']} batches p95 {v['p95_ms']:.0f} ms"
        + (f" state {v['state_rows']:,}" if v["state_rows"] is not None else "")
        for q, v in m["queries"].items()
    )
    return (
        f"minute {m['minute']:3d}: JVM {m['jvm_rss']:.0f} MiB (heap floor "
        f"{m['heap_floor']:.0f}, outside the heap {m['other_anon']:.0f}), "
        f"Python {m['python_rss']:.0f} MiB; {queries}"
    )


def report(minutes: list[dict], judge: int) -> None:
    """The last ``judge`` minutes held to 5 %: largest against smallest."""
    last = minutes[-judge:]
    for key in ("jvm_rss", "heap_floor", "other_anon", "python_rss"):
        values = [m[key] for m in last]
        print(f"{key}, last {len(last)} minutes: {spread(values)}")
    for query in last[-1]["queries"]:
        states = [m["queries"].get(query, {}).get("state_rows") for m in last]
        if all(s is not None for s in states):
            print(f"{query} state rows, last {len(last)} minutes: {spread(states)}")
        p95s = [m["queries"].get(query, {}).get("p95_ms", 0) for m in last]
        print(f"{query} batch p95 ms, last {len(last)} minutes: {spread(p95s)}")


def spread(values: list[float]) -> str:
    low, high = min(values), max(values)
    within = (high - low) / low * 100 if low else float("inf")
    return (
        f"min {low:,.0f}, median {statistics.median(values):,.0f}, max {high:,.0f} "
        f"({within:.1f} % apart)"
    )


def parquet_rows(table: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in table.glob("*.parquet"))


if __name__ == "__main__":
    main()
