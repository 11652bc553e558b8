"""Where the CPU of Spark's JVM goes while a realtime benchmark runs: each
group of its threads' CPU seconds, every 5 s from the moment the query
starts. Linux only (it reads ``/proc``). Run it beside
``realtime_latency.py``, whose runs it finds by their log:

    python jvm_threads.py --seconds 120 --out threads.txt &
    python realtime_latency.py --modes "Real-Time Mode" --seconds 300

Groups, by the name Java gives each thread: ``tasks`` (the executor's, in a
local Spark), ``C2`` and ``C1`` (the JIT's two compilers), ``GC``, ``py4j``
(PySpark's calls: the run's own, the planner's warm-up), ``kafka`` (the
Kafka sink's producer), and ``other``.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from collections import Counter
from pathlib import Path

GROUPS = {
    "Executor task": "tasks",
    "C2 Compiler": "C2",
    "C1 Compiler": "C1",
    "GC Thread": "GC",
    "G1 ": "GC",
    "Thread-": "py4j",
    "kafka-producer": "kafka",
}
SHOWN = ["tasks", "C2", "C1", "GC", "py4j", "kafka", "other"]
TICKS = os.sysconf("SC_CLK_TCK")


def spark_jvm(app_name: str) -> int | None:
    """The pid of the JVM that runs Spark for ``app_name``."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            command = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"org.apache.spark.deploy.SparkSubmit" in command and (
            f"spark.app.name={app_name}".encode() in command
        ):
            return int(proc.name)
    return None


def cpu_by_group(pid: int) -> Counter:
    """CPU seconds so far of each group of ``pid``'s threads."""
    seconds: Counter = Counter()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended
            continue
        group = next((g for p, g in GROUPS.items() if name.startswith(p)), "other")
        seconds[group] += (int(fields[11]) + int(fields[12])) / TICKS
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--app-name", default="bench_project")
    parser.add_argument(
        "--workdir", type=Path, default=Path("/tmp/kedro-streaming-bench")
    )
    args = parser.parse_args()
    began = time.time()
    run_log = re.compile(r"realtime-[0-9a-f]{8}\.log$")
    while True:  # the next run's query started
        logs = [
            p
            for p in args.workdir.glob("realtime-*.log")
            if run_log.search(p.name) and p.stat().st_mtime > began
        ]
        if any("Started streaming query" in p.read_text() for p in logs):
            break
        time.sleep(0.2)
    pid = spark_jvm(args.app_name)
    if pid is None:
        raise SystemExit(f"No Spark JVM for {args.app_name}")
    started = time.monotonic()
    before = cpu_by_group(pid)
    lines = [
        "CPU s before the query started: "
        + ", ".join(f"{g} {before[g]:.1f}" for g in SHOWN),
        "CPU s per 5 s from then: " + ", ".join(SHOWN),
    ]
    while time.monotonic() - started < args.seconds:
        time.sleep(5)
        now = cpu_by_group(pid)
        at = time.monotonic() - started
        # A thread that ended takes its seconds with it: not below 0.
        lines.append(
            f"{at:4.0f} s  "
            + "  ".join(f"{max(0.0, now[g] - before[g]):5.2f}" for g in SHOWN)
        )
        before = now
    args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
