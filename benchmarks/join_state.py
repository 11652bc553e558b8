"""Join state over a long run: the stream-stream join recipe of docs/stateful.md.

Loads ``trips_with_payments`` from the generated project's
``docs/stateful.md`` (its shared-imports block and the block defining it,
exec'd as written) and runs it on two ``rate`` sources, locally, with the
project's Spark settings (local[2], 2 shuffle partitions, UTC, AQE off,
RocksDB with changelog checkpointing, 2g driver), a processing-time trigger,
appending the join to parquet. Trip ``v`` drops off at ``base + v/rate``;
payments are deterministic from the trip id: 80% paid once, 30 s to 13.5 min
after drop-off; 5% paid twice in time; 5% paid 20 min after (too late); 10%
never; and a payment for an unknown trip every 1000 rows.

Every minute, from the query's last progress: the join's state rows,
``memoryUsedBytes``, commit time, its custom (RocksDB) metrics and the
minute's batch durations; the driver JVM's RSS (``/proc``) and heap used
(``jcmd GC.heap_info``), and its resident memory split by mapping (the
heap's range, files, the rest). One line per minute, and ``minutes.csv`` (every
progress report in ``progress.jsonl``) under ``--workdir``.

At the end the query stops between two batches, the inputs it read (the
rate sources' values, up to their committed end offsets) are generated again
as parquet, and the join is computed independently with pandas: every
in-time pair, and every unpaid trip whose drop-off plus ``pay_within`` is
before the last batch's watermark. It must equal the sink's rows, as sets.

    python benchmarks/join_state.py [--minutes 60] [--rate 100]
        [--trigger "5 seconds"] [--workdir /tmp/join-state-bench]
        [--how left_outer] [--trips-late-by "10 minutes"]
        [--payments-late-by "10 minutes"] [--pay-within "15 minutes"]
        [--conf KEY=VALUE ...]

Run it with the benchmark project's virtualenv (PySpark, pandas, pyarrow),
e.g. ``/tmp/kedro-streaming-bench/venv/bin/python``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from jvm_memory import jvm_memory  # noqa: E402 (beside this file)

DOC = HERE.parent / "{{ cookiecutter.repo_name }}" / "docs" / "stateful.md"
SPARK_CONF = {
    "spark.master": "local[2]",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.adaptive.enabled": "false",
    "spark.ui.enabled": "false",
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.driver.memory": "2g",
    "spark.ui.showConsoleProgress": "false",
}
# Payment lanes: (delay after drop-off in seconds, which trips, by id % 20).
# A lane's payment row v pays trip v - delay * rate, so it comes exactly
# `delay` after the drop-off, in event time and (the rate being steady) in
# processing time.
ONCE = [(30 + 60 * c, f"{{n}} % 20 < 16 AND {{n}} % 14 = {c}") for c in range(14)]
TWICE = [(270, "{n} % 20 = 19"), (690, "{n} % 20 = 19")]
TOO_LATE = [(1200, "{n} % 20 = 18")]
UNKNOWN_EVERY = 1000
# The two sources differ by their partitions only, so their progress
# reports can be told apart (the description names numPartitions).
TRIPS_PARTITIONS, PAYMENTS_PARTITIONS = 1, 2


def doc_function(doc: Path = DOC):
    """``trips_with_payments`` as the page defines it, with its imports."""
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)
    imports = next(b for b in blocks if "from pyspark.sql" in b)
    recipe = next(b for b in blocks if "def trips_with_payments" in b)
    namespace: dict = {}
    exec(imports, namespace)
    exec(recipe, namespace)
    return namespace["trips_with_payments"], imports + "\n\n" + recipe


def event_time(value_col: str, base_us: int, rate: int) -> str:
    return f"timestamp_micros({base_us} + {value_col} * 1000000 div {rate})"


def trips_from(values, base_us: int, rate: int):
    """Trips from rows with a ``value`` (a rate source's, or a range's)."""
    from pyspark.sql import functions as F

    return values.select(
        F.col("value").cast("string").alias("trip_id"),
        F.expr(event_time("value", base_us, rate)).alias("dropoff_at"),
        (F.lit(5.0) + (F.col("value") % 50) + 0.5).alias("fare"),
    )


def payments_from(values, base_us: int, rate: int):
    """Payments from rows with a ``value``: each lane pays one trip (or none)."""
    from pyspark.sql import functions as F

    lanes = []
    for delay, which in ONCE + TWICE + TOO_LATE:
        n = f"(value - {delay * rate})"
        lanes.append(
            F.expr(
                f"IF({n} >= 0 AND ({which.format(n=n)}), "
                f"named_struct('trip_id', CAST({n} AS STRING), "
                f"'amount', 5.5D + {n} % 50 + {delay % 7}), NULL)"
            )
        )
    lanes.append(
        F.expr(
            f"IF(value % {UNKNOWN_EVERY} = 7, named_struct('trip_id', "
            "concat('x', CAST(value AS STRING)), 'amount', 1.0D), NULL)"
        )
    )
    return (
        values.select(
            F.explode(F.array(*lanes)).alias("p"),
            F.expr(event_time("value", base_us, rate)).alias("paid_at"),
        )
        .where("p IS NOT NULL")
        .select(
            "p.trip_id", "paid_at", F.col("p.amount").cast("double").alias("amount")
        )
    )


def rate_source(spark, rate: int, partitions: int):
    return (
        spark.readStream.format("rate")
        .option("rowsPerSecond", rate)
        .option("numPartitions", partitions)
        .load()
    )


def interval_seconds(text: str) -> float:
    number, unit = text.split()
    scale = {"second": 1, "minute": 60, "hour": 3600}[unit.rstrip("s")]
    return float(number) * scale


def offsets(progress: dict) -> tuple[int, int]:
    """The rate sources' end offsets (whole seconds): trips, payments."""
    ends = {}
    for source in progress["sources"]:
        parts = re.search(r"numPartitions=(\d+)", source["description"])
        ends[int(parts.group(1))] = int(json.loads(str(source["endOffset"])))
    return ends[TRIPS_PARTITIONS], ends[PAYMENTS_PARTITIONS]


def iso_ms(text: str) -> int:
    moment = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")
    return int(moment.replace(tzinfo=timezone.utc).timestamp() * 1000)


def minute_row(minute, progresses, pid, started, custom_keys) -> dict:
    last = progresses[-1]
    op = last["stateOperators"][0] if last["stateOperators"] else {}
    durations = [p["durationMs"].get("triggerExecution", 0) for p in progresses]
    row = {
        "minute": minute,
        "elapsed_s": round(time.monotonic() - started),
        "batch_id": last["batchId"],
        "watermark": last.get("eventTime", {}).get("watermark", ""),
        "state_rows": op.get("numRowsTotal"),
        "state_rows_updated": op.get("numRowsUpdated"),
        "state_rows_removed": op.get("numRowsRemoved"),
        "memory_used_bytes": op.get("memoryUsedBytes"),
        "commit_ms": op.get("commitTimeMs"),
        "rows_dropped_by_watermark": op.get("numRowsDroppedByWatermark"),
        "batches": len(progresses),
        "batch_ms_last": durations[-1],
        "batch_ms_mean": round(sum(durations) / len(durations)),
        "batch_ms_max": max(durations),
        "input_rows_per_s": round(last.get("inputRowsPerSecond") or 0, 1),
        "load1": os.getloadavg()[0],
    }
    row.update(jvm_memory(pid))
    custom = op.get("customMetrics", {})
    for key in custom_keys:
        row[key] = custom.get(key)
    return row


def run(args, workdir: Path) -> None:
    from pyspark.sql import SparkSession

    trips_with_payments, source = doc_function()
    (workdir / "recipe.py").write_text(source)  # the code measured
    join = {
        "how": args.how,
        "trips_late_by": args.trips_late_by,
        "payments_late_by": args.payments_late_by,
        "pay_within": args.pay_within,
    }
    builder = SparkSession.builder.appName("join-state-bench")
    for key, value in {
        **SPARK_CONF,
        **dict(c.split("=", 1) for c in args.conf),
    }.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())

    base_us = int(time.time()) * 1_000_000
    trips = trips_from(
        rate_source(spark, args.rate, TRIPS_PARTITIONS), base_us, args.rate
    )
    payments = payments_from(
        rate_source(spark, args.rate, PAYMENTS_PARTITIONS), base_us, args.rate
    )
    out, checkpoint = workdir / "output", workdir / "checkpoint"
    query = (
        trips_with_payments(trips, payments, join)
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=args.trigger)
        .start()
    )
    started = time.monotonic()
    print(
        f"join {join}, rate {args.rate}/s, trigger {args.trigger}, "
        f"driver JVM pid {pid}, load {os.getloadavg()}",
        flush=True,
    )

    seen: dict[int, dict] = {}
    log = (workdir / "progress.jsonl").open("w")
    rows, custom_keys, minute, taken = [], None, 0, 0

    def collect() -> None:
        for progress in query.recentProgress:
            if progress.batchId not in seen:
                seen[progress.batchId] = json.loads(progress.json)
                log.write(progress.json.replace("\n", " ") + "\n")
        log.flush()

    try:
        while minute < args.minutes:
            time.sleep(
                max(0.1, min(5.0, started + 60 * (minute + 1) - time.monotonic()))
            )
            if query.exception():
                raise RuntimeError(str(query.exception()))
            collect()
            if time.monotonic() - started < 60 * (minute + 1):
                continue
            minute += 1
            batch = [seen[b] for b in sorted(seen) if b >= taken]
            if not batch:
                print(f"{minute:3d} min: no batch yet", flush=True)
                continue
            taken = batch[-1]["batchId"] + 1
            if custom_keys is None and batch[-1]["stateOperators"]:
                custom = batch[-1]["stateOperators"][0]["customMetrics"]
                custom_keys = sorted(k for k in custom if k.startswith("rocksdb"))
            row = minute_row(minute, batch, pid, started, custom_keys or [])
            rows.append(row)
            print(
                f"{minute:3d} min  batch {row['batch_id']:4d}  "
                f"state {row['state_rows']}  mem {row['memory_used_bytes']}  "
                f"commit {row['commit_ms']} ms  batch {row['batch_ms_mean']} ms "
                f"(max {row['batch_ms_max']})  RSS {row.get('vmrss_kb', 0) // 1024} MB  "
                f"heap {row.get('heap_used_kb', 0) // 1024} MB  "
                f"other anon {row.get('other_anon_kb', 0) // 1024} MB  load {row['load1']:.2f}",
                flush=True,
            )
            with (workdir / "minutes.csv").open("w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=list(rows[-1]))
                writer.writeheader()
                writer.writerows(rows)

        # Stop between two batches: just after one has reported.
        last_id = query.lastProgress["batchId"]
        while query.lastProgress["batchId"] == last_id:
            time.sleep(0.05)
        query.stop()
        collect()
    finally:
        log.close()
        if query.isActive:
            query.stop()

    last = seen[max(seen)]
    check(spark, args, join, workdir=workdir, base_us=base_us, last=last)
    spark.stop()


def check(spark, args, join, *, workdir, base_us, last) -> None:
    """The sink's rows against the join computed with pandas, as sets."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    metadata = workdir / "output" / "_spark_metadata"
    sink_batch = max(
        int(p.name.split(".")[0]) for p in metadata.iterdir() if p.name[0].isdigit()
    )
    trips_end, payments_end = offsets(last)
    watermark_ms = iso_ms(last["eventTime"]["watermark"])
    print(
        f"last batch {last['batchId']} (sink's last {sink_batch}); trips read "
        f"{trips_end * args.rate} rows, payments source {payments_end * args.rate} "
        f"values; watermark {last['eventTime']['watermark']}",
        flush=True,
    )

    # The inputs the query read, again: the rate sources' values up to the
    # end offsets of the last batch.
    inputs = workdir / "inputs"
    for name, make, end in (
        ("trips", trips_from, trips_end),
        ("payments", payments_from, payments_end),
    ):
        values = spark.range(end * args.rate).withColumnRenamed("id", "value")
        make(values, base_us, args.rate).write.mode("overwrite").parquet(
            str(inputs / name)
        )

    def frame(path) -> pd.DataFrame:
        table = pq.read_table(path)
        df = table.to_pandas()
        for column in ("dropoff_at", "paid_at"):
            if column in df:
                micros = table.column(column).cast(pa.timestamp("us", tz="UTC"))
                df[column] = micros.cast(pa.int64()).to_numpy()
        return df

    trips, payments = frame(inputs / "trips"), frame(inputs / "payments")
    within_us = int(interval_seconds(join["pay_within"]) * 1_000_000)
    pairs = trips.merge(payments, on="trip_id")
    pairs = pairs[
        (pairs.paid_at >= pairs.dropoff_at)
        & (pairs.paid_at <= pairs.dropoff_at + within_us)
    ]
    expected = Counter(
        zip(pairs.trip_id, pairs.dropoff_at, pairs.fare, pairs.paid_at, pairs.amount)
    )
    unpaid = trips[~trips.trip_id.isin(pairs.trip_id)]
    due = unpaid.dropoff_at + within_us
    boundary = set()
    if join["how"] == "left_outer":
        for t in unpaid[due < watermark_ms * 1000 - 1000].itertuples():
            expected[(t.trip_id, t.dropoff_at, t.fare, None, None)] += 1
        for t in unpaid[abs(due - watermark_ms * 1000) <= 1000].itertuples():
            boundary.add((t.trip_id, t.dropoff_at, t.fare, None, None))

    got = spark.read.parquet(str(workdir / "output")).selectExpr(
        "trip_id",
        "unix_micros(dropoff_at) AS d",
        "fare",
        "unix_micros(paid_at) AS p",
        "amount",
    )
    actual = Counter(
        (r.trip_id, r.d, r.fare, r.p, r.amount) for r in got.toLocalIterator()
    )
    missing, extra = expected - actual, actual - expected
    extra -= Counter({row: extra[row] for row in boundary if row in extra})
    holds = not missing and not extra
    n_unpaid = sum(n for row, n in actual.items() if row[3] is None)
    print(
        f"equality: {'HOLDS' if holds else 'FAILS'}: sink {sum(actual.values())} rows "
        f"({n_unpaid} unpaid), expected {sum(expected.values())}; missing "
        f"{sum(missing.values())}, extra {sum(extra.values())}, "
        f"boundary rows (within 1 ms of the watermark) {len(boundary)}",
        flush=True,
    )
    for row in list(missing)[:5]:
        print("  missing", row)
    for row in list(extra)[:5]:
        print("  extra", row)

    # What the state should hold after the last batch: trips not yet past
    # the watermark minus pay_within, payments not yet past the watermark.
    kept_trips = int((trips.dropoff_at + within_us > watermark_ms * 1000).sum())
    kept_payments = int((payments.paid_at > watermark_ms * 1000).sum())
    op = last["stateOperators"][0]
    print(
        f"state after the last batch: {op['numRowsTotal']} rows; by the watermark "
        f"{kept_trips} trips + {kept_payments} payments = {kept_trips + kept_payments}",
        flush=True,
    )
    (workdir / "check.json").write_text(
        json.dumps(
            {
                "holds": holds,
                "sink_rows": sum(actual.values()),
                "sink_unpaid_rows": n_unpaid,
                "expected_rows": sum(expected.values()),
                "missing": sum(missing.values()),
                "extra": sum(extra.values()),
                "boundary": len(boundary),
                "last_batch": last["batchId"],
                "sink_last_batch": sink_batch,
                "watermark": last["eventTime"]["watermark"],
                "trips_read": len(trips),
                "payments_read": len(payments),
                "state_rows": op["numRowsTotal"],
                "kept_trips": kept_trips,
                "kept_payments": kept_payments,
            },
            indent=2,
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=int, default=60)
    parser.add_argument("--rate", type=int, default=100, help="trips per second")
    parser.add_argument("--trigger", default="5 seconds")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/join-state-bench"))
    parser.add_argument("--how", default="left_outer", choices=["left_outer", "inner"])
    parser.add_argument("--trips-late-by", default="10 minutes")
    parser.add_argument("--payments-late-by", default="10 minutes")
    parser.add_argument("--pay-within", default="15 minutes")
    parser.add_argument(
        "--conf", action="append", default=[], help="KEY=VALUE, a Spark setting"
    )
    args = parser.parse_args()
    for name in ("output", "checkpoint", "inputs"):
        shutil.rmtree(args.workdir / name, ignore_errors=True)
    args.workdir.mkdir(parents=True, exist_ok=True)
    run(args, args.workdir)


if __name__ == "__main__":
    main()
