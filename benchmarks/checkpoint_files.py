"""What writing a streaming query's logs costs, per checkpoint file manager.

Each micro-batch writes a file to its query's offset log (Spark's
``walCommit``) and one to its commit log (``commitOffsets``). On a local
disk without Hadoop's native library, Spark's default manager (FileContext)
has Hadoop start a ``readlink`` or ``chmod`` process at each step of a
write; the FileSystem-based one, which the project's spark.yml sets, does
not. This runs the same query (the rate source into ``noop``, a micro-batch
every 100 ms, 25 s) once per manager, each in a fresh JVM, and prints the
medians of Spark's own durations over the batches after the first five
(PySpark 4.1 or later: the class name of 4.0 differs).

    python benchmarks/checkpoint_files.py [--seconds 25]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

MANAGERS = {
    "Spark's default (FileContext)": None,
    "FileSystem-based (spark.yml)": (
        "org.apache.spark.sql.execution.streaming.checkpointing."
        "FileSystemBasedCheckpointFileManager"
    ),
}
DURATIONS = ("walCommit", "commitOffsets", "triggerExecution")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=25)
    parser.add_argument("--run", help=argparse.SUPPRESS)  # one manager, this process
    args = parser.parse_args()
    if args.run is not None:
        print(json.dumps(batch_durations(args.run or None, args.seconds)))
        return
    for name, manager in MANAGERS.items():
        out = subprocess.run(
            [sys.executable, __file__, "--seconds", str(args.seconds)]
            + ["--run", manager or ""],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        durations = json.loads(out.splitlines()[-1])
        medians = ", ".join(
            f"{key} {statistics.median(durations[key]):.1f}" for key in DURATIONS
        )
        print(f"{name}: {len(durations['walCommit'])} batches, median ms: {medians}")


def batch_durations(manager: str | None, seconds: int) -> dict[str, list[int]]:
    from pyspark.sql import SparkSession  # noqa: PLC0415 (only in the child)

    builder = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
    )
    if manager:
        builder = builder.config(
            "spark.sql.streaming.checkpointFileManagerClass", manager
        )
    spark = builder.getOrCreate()
    with tempfile.TemporaryDirectory() as checkpoint:
        query = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", 100)
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="100 milliseconds")
            .start()
        )
        time.sleep(seconds)
        query.stop()
        batches = query.recentProgress[5:]  # past the cold start
    spark.stop()
    return {key: [b["durationMs"].get(key, 0) for b in batches] for key in DURATIONS}


if __name__ == "__main__":
    main()
