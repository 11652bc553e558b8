"""The state store's cost: RocksDB (changelog checkpointing) against Spark's default.

The generated project's spark.yml sets RocksDB with changelog checkpointing;
Spark's default is the HDFS-backed store (state in maps on the JVM heap,
each micro-batch writing a delta file). This runs the same stateful query
with each store, in a fresh JVM each time, the variants' order alternating
round after round, with the project's other Spark settings (``--spark-yml``:
local[2], 2 shuffle partitions, UTC, AQE off; its Kafka packages left out):

- TLC-shaped, time-ordered trips (``trips.py``) as parquet files, read as a
  file stream, one file per micro-batch (``maxFilesPerTrigger=1``);
- a watermark on dropoff time (``--watermark``, 10 minutes as the example),
  ``dropDuplicatesWithinWatermark`` on a trip key, then 1-hour tumbling
  windows per pickup zone (the example's aggregates), appended to parquet.

First run: ``--files`` files, availableNow. Per micro-batch: the state commit
(``commitTimeMs`` summed over the stateful operators) and Spark's durations;
at the end, the state's rows and ``memoryUsedBytes``, the driver JVM's peak
RSS (VmHWM), its heap (sampled, and after a full GC at the end). Restart: a
new JVM on the same checkpoint with ``--restart-files`` new files; from
``start()`` to the end of its first micro-batch, and the store's load
metrics. Prints one line per run, then a Markdown table (medians over
rounds); every progress report is kept under ``--workdir``.

    python benchmarks/state_store.py [--rows 1000000] [--files 24]
        [--restart-files 3] [--rounds 2] [--variants hdfs,rocksdb]
        [--watermark "10 minutes"] [--workdir /tmp/state-store-bench]

Run it with the benchmark project's virtualenv (PySpark, pandas, pyarrow),
e.g. ``/tmp/kedro-streaming-bench/venv/bin/python``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
STATE = "org.apache.spark.sql.execution.streaming.state."
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
VARIANTS = {
    "hdfs": {PROVIDER: STATE + "HDFSBackedStateStoreProvider", CHANGELOG: "false"},
    "rocksdb": {PROVIDER: STATE + "RocksDBStateStoreProvider", CHANGELOG: "true"},
    # Not in the default comparison: RocksDB uploading a snapshot every batch.
    "rocksdb-snapshots": {
        PROVIDER: STATE + "RocksDBStateStoreProvider",
        CHANGELOG: "false",
    },
}
# Settings of spark.yml this benchmark does not take: no Kafka or Avro here
# (resolving them would only add to the start), and the store is the variant's.
LEFT_OUT = ("spark.jars.packages", PROVIDER, CHANGELOG)
SCHEMA = (
    "VendorID BIGINT, lpep_pickup_datetime TIMESTAMP, lpep_dropoff_datetime TIMESTAMP, "
    "store_and_fwd_flag STRING, RatecodeID BIGINT, PULocationID BIGINT, "
    "DOLocationID BIGINT, passenger_count BIGINT, trip_distance DOUBLE, "
    "fare_amount DOUBLE, extra DOUBLE, mta_tax DOUBLE, tip_amount DOUBLE, "
    "tolls_amount DOUBLE, ehail_fee DOUBLE, improvement_surcharge DOUBLE, "
    "total_amount DOUBLE, payment_type BIGINT, trip_type BIGINT, "
    "congestion_surcharge DOUBLE"
)
TRIP_KEY = [
    "VendorID",
    "lpep_pickup_datetime",
    "lpep_dropoff_datetime",
    "PULocationID",
    "DOLocationID",
]
LOAD_METRICS = (
    "rocksdbLoadLatencyMs",
    "rocksdbLoadFromSnapshotLatencyMs",
    "rocksdbNumLoadedFromDfs",
    "rocksdbNumReplayChangelogFiles",
    "rocksdbReplayChangeLogLatencyMs",
    "rocksdbFilesCopied",
    "loadedMapCacheHitCount",
    "loadedMapCacheMissCount",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=24, help="first run's files")
    parser.add_argument("--restart-files", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variants", default="hdfs,rocksdb", help=", ".join(VARIANTS))
    parser.add_argument("--watermark", default="10 minutes")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/state-store-bench"))
    parser.add_argument(
        "--spark-yml",
        type=Path,
        default=Path("/tmp/kedro-streaming-bench/bench-project/conf/base/spark.yml"),
        help="the generated project's conf/base/spark.yml",
    )
    parser.add_argument(
        "--explain", action="store_true", help="keep each run's explain(extended)"
    )
    # One run's phase, in this process (the parent starts one per JVM).
    parser.add_argument("--child", nargs=3, metavar=("VARIANT", "PHASE", "RUN_DIR"))
    args = parser.parse_args()
    if args.child:
        variant, phase, run_dir = args.child
        print(json.dumps(child(args, variant, phase, Path(run_dir))))
        return

    variants = args.variants.split(",")
    if unknown := set(variants) - set(VARIANTS):
        sys.exit(f"unknown variants: {', '.join(sorted(unknown))}")
    data = trip_files(args.workdir, args.rows, args.files + args.restart_files)
    print(
        f"{args.rows:,} trips in {args.files} + {args.restart_files} parquet files; "
        f"watermark {args.watermark}; {os.cpu_count()} cores",
        flush=True,
    )
    runs: list[dict] = []
    for round_number in range(1, args.rounds + 1):
        # Alternate the order too, so that neither store always goes first.
        order = variants if round_number % 2 else variants[::-1]
        for variant in order:
            run_dir = args.workdir / "runs" / f"{round_number}-{variant}"
            shutil.rmtree(run_dir, ignore_errors=True)
            (run_dir / "input").mkdir(parents=True)
            link(data[: args.files], run_dir / "input")
            load = os.getloadavg()[0]
            first = run_child(args, variant, "first", run_dir)
            link(data[args.files :], run_dir / "input")
            restart = run_child(args, variant, "restart", run_dir)
            run = summarise(first, restart)
            run.update(round=round_number, variant=variant, load=load)
            (run_dir / "summary.json").write_text(json.dumps(run, indent=1))
            runs.append(run)
            print(one_line(run), flush=True)
    (args.workdir / "results.json").write_text(json.dumps(runs, indent=1))
    print()
    print(table(runs, variants))


def trip_files(workdir: Path, rows: int, files: int) -> list[Path]:
    """``rows`` time-ordered trips in ``files`` parquet files (kept while unchanged),
    their modification times in event-time order, as Spark's file source reads."""
    sys.path.insert(0, str(HERE))
    folder = workdir / f"trips-{rows}-{files}"
    paths = [folder / f"trips-{index:04d}.parquet" for index in range(files)]
    if (folder / "complete").exists():
        return paths
    import numpy as np
    import pandas as pd
    from trips import trips

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    frame = trips(rows)
    for column in ("lpep_pickup_datetime", "lpep_dropoff_datetime"):
        frame[column] = pd.to_datetime(frame[column]).dt.tz_localize("UTC")
    bounds = np.linspace(0, len(frame), files + 1).astype(int)
    now = time.time()
    for index, path in enumerate(paths):
        frame.iloc[bounds[index] : bounds[index + 1]].to_parquet(
            path, index=False, coerce_timestamps="us"
        )
        os.utime(path, (now - files + index, now - files + index))
    (folder / "complete").touch()
    return paths


def link(paths: list[Path], folder: Path) -> None:
    """Hard links (same modification times, so the same order) in ``folder``."""
    for path in paths:
        os.link(path, folder / path.name)


def run_child(
    args: argparse.Namespace, variant: str, phase: str, run_dir: Path
) -> dict:
    command = [sys.executable, __file__, "--child", variant, phase, str(run_dir)]
    command += ["--watermark", args.watermark, "--spark-yml", str(args.spark_yml)]
    command += ["--explain"] if args.explain else []
    started = time.monotonic()
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            out, err = process.communicate()
        except BaseException:
            process.kill()
            raise
    seconds = time.monotonic() - started
    (run_dir / f"{phase}.log").write_text(err)
    if process.returncode != 0:
        sys.exit(f"{variant} {phase} failed:\n{out[-2000:]}\n{err[-4000:]}")
    result = json.loads(out.splitlines()[-1])
    result["process_s"] = seconds
    return result


def child(args: argparse.Namespace, variant: str, phase: str, run_dir: Path) -> dict:
    """One phase of one run, in this process's own JVM."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    begun = time.time()
    conf = yaml.safe_load(args.spark_yml.read_text())
    conf = {k: v for k, v in conf.items() if k not in LEFT_OUT}
    conf.update(VARIANTS[variant])
    conf["spark.app.name"] = f"state-store-{variant}-{phase}"
    spark = SparkSession.builder.config(
        map={
            k: str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in conf.items()
        }
    ).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    jvm = spark._jvm
    pid = jvm.java.lang.ProcessHandle.current().pid()
    memory = jvm.java.lang.management.ManagementFactory.getMemoryMXBean()
    session_s = time.time() - begun

    trips = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(run_dir / "input"))
    )
    summary = (
        trips.withWatermark("lpep_dropoff_datetime", args.watermark)
        .dropDuplicatesWithinWatermark(TRIP_KEY)
        .groupBy(F.window("lpep_dropoff_datetime", "1 hour"), "PULocationID")
        .agg(
            F.count(F.lit(1)).alias("trip_count"),
            F.avg("passenger_count").alias("avg_passengers"),
            F.sum("trip_distance").alias("total_distance"),
            F.avg("trip_distance").alias("avg_distance"),
            F.sum("fare_amount").alias("total_fare"),
            F.avg("fare_amount").alias("avg_fare"),
            F.sum("total_amount").alias("total_amount"),
            F.avg("total_amount").alias("avg_amount"),
        )
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "PULocationID",
            "trip_count",
            "avg_passengers",
            "total_distance",
            "avg_distance",
            "total_fare",
            "avg_fare",
            "total_amount",
            "avg_amount",
        )
    )
    rss_peak_sampled = heap_peak = 0
    started = time.time()
    query = (
        summary.writeStream.format("parquet")
        .outputMode("append")
        .option("checkpointLocation", str(run_dir / "checkpoint"))
        .trigger(availableNow=True)
        .start(str(run_dir / "out"))
    )
    while query.isActive:
        rss_peak_sampled = max(rss_peak_sampled, proc_status(pid)["VmRSS"])
        heap_peak = max(heap_peak, memory.getHeapMemoryUsage().getUsed())
        time.sleep(0.2)
    ended = time.time()
    if query.exception():
        raise RuntimeError(str(query.exception()))
    status = proc_status(pid)
    jvm.java.lang.System.gc()
    heap_after_gc = memory.getHeapMemoryUsage().getUsed()
    progress = [json.loads(p.json) for p in query.recentProgress]
    (run_dir / f"{phase}-progress.json").write_text(json.dumps(progress, indent=1))
    if args.explain:
        (run_dir / f"{phase}-explain.txt").write_text(query._jsq.explainInternal(True))
    spark.stop()
    return {
        "session_s": session_s,
        "started": started,
        "query_s": ended - started,
        "rss_peak": status["VmHWM"],
        "rss_peak_sampled": rss_peak_sampled,
        "rss_end": status["VmRSS"],
        "heap_peak_sampled": heap_peak,
        "heap_after_gc": heap_after_gc,
        "batches": [batch(p) for p in progress],
    }


def proc_status(pid: int) -> dict[str, int]:
    """The process's memory lines of /proc/PID/status, in bytes."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {
        name: int(value.split()[0]) * 1024
        for name, value in (line.split(":", 1) for line in lines)
        if name in ("VmRSS", "VmHWM")
    }


def batch(progress: dict) -> dict:
    """What this benchmark keeps of a micro-batch's progress report."""
    operators = progress.get("stateOperators", [])
    loads: dict[str, float] = {}
    for operator in operators:
        for name, value in operator.get("customMetrics", {}).items():
            if name in LOAD_METRICS:
                loads[name] = loads.get(name, 0) + value
    timestamp = datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00"))
    return {
        "id": progress["batchId"],
        "rows": progress["numInputRows"],
        "timestamp": timestamp.timestamp(),
        "durations": progress["durationMs"],
        "commit_ms": sum(o.get("commitTimeMs", 0) for o in operators),
        "update_ms": sum(
            o.get("allUpdatesTimeMs", 0) + o.get("allRemovalsTimeMs", 0)
            for o in operators
        ),
        "operators": [
            {
                key: operator.get(key)
                for key in (
                    "operatorName",
                    "numRowsTotal",
                    "numRowsUpdated",
                    "numRowsRemoved",
                    "commitTimeMs",
                    "allUpdatesTimeMs",
                    "allRemovalsTimeMs",
                    "memoryUsedBytes",
                    "numShufflePartitions",
                    "numStateStoreInstances",
                )
            }
            for operator in operators
        ],
        "loads": loads,
    }


def summarise(first: dict, restart: dict) -> dict:
    batches = first["batches"]
    commits = [b["commit_ms"] for b in batches]
    durations = [b["durations"].get("triggerExecution", 0) for b in batches]
    # The state as the last micro-batch with data left it (availableNow may
    # end on a batch without data that only moves the watermark on).
    last = [b for b in batches if b["rows"]][-1]["operators"]
    memory = [sum(o["memoryUsedBytes"] or 0 for o in b["operators"]) for b in batches]
    opening = restart["batches"][0]
    opened = opening["timestamp"] + opening["durations"]["triggerExecution"] / 1000
    return {
        "batches": len(batches),
        "data_batches": sum(1 for b in batches if b["rows"]),
        "commit_median": statistics.median(commits),
        "commit_max": max(commits),
        "commit_max_batch": batches[commits.index(max(commits))]["id"],
        "update_median": statistics.median(b["update_ms"] for b in batches),
        "batch_median": statistics.median(durations),
        "batch_max": max(durations),
        **{
            f"{key}_median": statistics.median(
                b["durations"].get(key, 0) for b in batches
            )
            for key in ("addBatch", "walCommit", "commitOffsets", "queryPlanning")
        },
        "state_rows": sum(o["numRowsTotal"] or 0 for o in last),
        "state_rows_by_operator": {o["operatorName"]: o["numRowsTotal"] for o in last},
        "state_memory": sum(o["memoryUsedBytes"] or 0 for o in last),
        "state_memory_by_operator": {
            o["operatorName"]: o["memoryUsedBytes"] for o in last
        },
        "state_memory_max": max(memory),
        "rss_peak": first["rss_peak"],
        "heap_peak_sampled": first["heap_peak_sampled"],
        "heap_after_gc": first["heap_after_gc"],
        "query_s": first["query_s"],
        "process_s": first["process_s"],
        "restart_to_first_batch_s": opened - restart["started"],
        "restart_first_batch": opening["durations"],
        "restart_first_commit_ms": opening["commit_ms"],
        "restart_loads": opening["loads"],
        "restart_batches": len(restart["batches"]),
        "restart_rss_peak": restart["rss_peak"],
        "restart_process_s": restart["process_s"],
        "restart_session_s": restart["session_s"],
    }


def one_line(run: dict) -> str:
    return (
        f"round {run['round']} {run['variant']:8s} load {run['load']:.2f}: "
        f"{run['batches']} batches, commit median {run['commit_median']:.0f} ms "
        f"max {run['commit_max']} ms (batch {run['commit_max_batch']}), "
        f"batch median {run['batch_median']:.0f} max {run['batch_max']} ms, "
        f"state {run['state_rows']:,} rows {run['state_memory'] / 2**20:.1f} MiB, "
        f"peak RSS {run['rss_peak'] / 2**20:.0f} MiB, "
        f"heap after GC {run['heap_after_gc'] / 2**20:.0f} MiB, "
        f"query {run['query_s']:.1f} s; restart: first batch after "
        f"{run['restart_to_first_batch_s']:.2f} s "
        f"(addBatch {run['restart_first_batch'].get('addBatch')} ms), "
        f"loads {run['restart_loads']}"
    )


def table(runs: list[dict], variants: list[str]) -> str:
    """Per variant, the median over rounds (and every round's value) of each figure."""
    rows = [
        (
            "micro-batches (with data)",
            lambda r: f"{r['batches']} ({r['data_batches']})",
        ),
        ("state commit per batch, median (ms)", lambda r: r["commit_median"]),
        ("state commit per batch, max (ms)", lambda r: r["commit_max"]),
        (
            "state updates + removals per batch, median (ms)",
            lambda r: r["update_median"],
        ),
        ("batch duration, median (ms)", lambda r: r["batch_median"]),
        ("batch duration, max (ms)", lambda r: r["batch_max"]),
        ("addBatch, median (ms)", lambda r: r["addBatch_median"]),
        ("walCommit, median (ms)", lambda r: r["walCommit_median"]),
        ("commitOffsets, median (ms)", lambda r: r["commitOffsets_median"]),
        ("state rows after the last data batch", lambda r: r["state_rows"]),
        ("memoryUsedBytes then (MiB)", lambda r: r["state_memory"] / 2**20),
        (
            "memoryUsedBytes, max over batches (MiB)",
            lambda r: r["state_memory_max"] / 2**20,
        ),
        ("driver peak RSS, VmHWM (MiB)", lambda r: r["rss_peak"] / 2**20),
        (
            "driver heap used, sampled peak (MiB)",
            lambda r: r["heap_peak_sampled"] / 2**20,
        ),
        (
            "driver heap after full GC at end (MiB)",
            lambda r: r["heap_after_gc"] / 2**20,
        ),
        ("query wall time (s)", lambda r: r["query_s"]),
        ("process wall time (s)", lambda r: r["process_s"]),
        (
            "restart: start() to end of first batch (s)",
            lambda r: r["restart_to_first_batch_s"],
        ),
        (
            "restart: first batch addBatch (ms)",
            lambda r: r["restart_first_batch"].get("addBatch", 0),
        ),
        (
            "restart: first batch state commit (ms)",
            lambda r: r["restart_first_commit_ms"],
        ),
        ("restart: driver peak RSS (MiB)", lambda r: r["restart_rss_peak"] / 2**20),
        ("restart: process wall time (s)", lambda r: r["restart_process_s"]),
    ]
    lines = [
        "| figure | " + " | ".join(variants) + " |",
        "| --- |" + " --- |" * len(variants),
    ]
    for name, value in rows:
        cells = []
        for variant in variants:
            values = [value(r) for r in runs if r["variant"] == variant]
            if isinstance(values[0], str):
                cells.append(", ".join(values))
                continue
            each = ", ".join(f"{v:,.0f}" if v >= 100 else f"{v:.2f}" for v in values)
            median = statistics.median(values)
            cells.append(
                f"**{median:,.0f}** ({each})"
                if median >= 100
                else f"**{median:.2f}** ({each})"
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
