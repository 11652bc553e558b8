"""A table kept from Debezium's events: the plugin (debezium_changes and a
Delta sink with `changes:`, through its hooks) against a hand-written PySpark
script doing the same work (parse the events, foreachBatch MERGE keeping the
newest change per key), same session settings, same files, one micro-batch
per file.

    python benchmarks/cdc.py make   --folder /tmp/cdc --files 8 --events 20000 --keys 100000
    python benchmarks/cdc.py plugin --folder /tmp/cdc     # prints seconds per batch
    python benchmarks/cdc.py handwritten --folder /tmp/cdc

Each run starts from no table and no checkpoint; `compare` checks that both
left the same rows. Results: benchmarks/README.md, "Changes in, tables out".
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path

ROW = "id INT NOT NULL, name STRING, city STRING, balance BIGINT"


def make(folder: Path, files: int, events: int, keys: int, snapshot: bool) -> None:
    """Debezium JSON events: each key created once, then updated or deleted,
    in sequence order (a database's log), cut into ``files`` files; with
    ``snapshot``, a first file reads every key (op ``r``, as Debezium's
    initial snapshot), so that the changes after it meet a table of ``keys``
    rows."""
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "events").mkdir(parents=True)
    rng = random.Random(7)
    seen: set[int] = set()
    lsn = 0
    if snapshot:
        with (folder / "events" / "0000.json").open("w") as out:
            for key in range(keys):
                lsn += 1
                row = {
                    "id": key,
                    "name": f"n{key % 1000}",
                    "city": "Lyon",
                    "balance": 0,
                }
                out.write(
                    json.dumps(
                        {"after": row, "source": {"lsn": lsn}, "op": "r", "ts_ms": lsn}
                    )
                    + "\n"
                )
                seen.add(key)
    for number in range(int(snapshot), files + int(snapshot)):
        lines = []
        for _ in range(events):
            lsn += 1
            key = rng.randrange(keys)
            op = "c" if key not in seen else rng.choice("uuuud")
            row = {
                "id": key,
                "name": f"n{rng.randrange(1000)}",
                "city": rng.choice(["Lyon", "Oslo", "Rome"]),
                "balance": rng.randrange(10**6),
            }
            if op == "d":
                seen.discard(key)
            else:
                seen.add(key)
            lines.append(
                json.dumps(
                    {
                        "before": row if op == "d" else None,
                        "after": None if op == "d" else row,
                        "source": {"lsn": lsn},
                        "op": op,
                        "ts_ms": lsn,
                    }
                )
            )
        (folder / "events" / f"{number:04d}.json").write_text("\n".join(lines) + "\n")


def session():
    import pyspark
    from kedro_streaming import delta_package_for
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]")
        .config("spark.jars.packages", delta_package_for(pyspark.__version__))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog",
            "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        )
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )


def plugin(folder: Path, scd_type: int = 1) -> None:
    from kedro.framework.hooks.manager import _create_hook_manager
    from kedro.io import DataCatalog
    from kedro.pipeline import node, pipeline
    from kedro.runner import SequentialRunner
    from kedro_streaming import StreamingQueryHooks, debezium_changes

    spark = session()

    def changes(events):
        parsed = debezium_changes(events, ROW)
        return parsed.where("problems IS NULL").select(
            "id", "name", "city", "balance", "_op", "_lsn"
        )

    catalog = DataCatalog.from_config(
        {
            "events": {
                "type": "kedro_streaming.SparkStreamingDataset",
                "file_format": "text",
                "filepath": str(folder / "events"),
                "load_args": {"maxFilesPerTrigger": 1},
            },
            "table": {
                "type": "kedro_streaming.SparkStreamingDataset",
                "file_format": "delta",
                "filepath": str(folder / "plugin"),
                "save_args": {
                    "checkpoint": str(folder / "plugin_cp"),
                    "changes": {"keys": "id", "sequence": "_lsn", "scd_type": scd_type},
                },
            },
        }
    )
    nodes = pipeline([node(changes, "events", "table", name="keep")])
    hooks = StreamingQueryHooks()
    hooks.after_context_created(
        type(
            "C",
            (),
            {
                "config_loader": {
                    "streaming": {
                        "trigger": "available_now",
                        "metrics_port": 0,
                        "state_dir": str(folder / "plugin_streams"),
                    }
                }
            },
        )
    )
    manager = _create_hook_manager()
    manager.register(hooks)
    started = time.monotonic()
    hooks.before_pipeline_run({}, nodes, catalog)
    SequentialRunner().run(nodes, catalog, manager)
    hooks.after_pipeline_run({})
    log = folder / "plugin_streams" / "progress.jsonl"
    durations = [json.loads(line)["duration_ms"] for line in log.open()]
    report("plugin", folder, spark, started, durations)


def handwritten(folder: Path, exact: bool = False) -> None:
    """``exact``: with the plugin's guarantees written by hand too (deletes
    remembered beside the table, the MERGE tagged with Delta's idempotent
    pair), no figures."""
    from pyspark.sql import functions as F

    spark = session()
    name = "handwritten_exact" if exact else "handwritten"
    path = str(folder / name)
    image = F.from_json(
        "value",
        "STRUCT<op: STRING, before: STRUCT<id: INT, "
        "name: STRING, city: STRING, balance: BIGINT>, after: STRUCT<id: "
        "INT, name: STRING, city: STRING, balance: BIGINT>, source: "
        "STRUCT<lsn: BIGINT>>",
    )
    events = (
        spark.readStream.format("text")
        .option("maxFilesPerTrigger", 1)
        .load(str(folder / "events"))
    )
    parsed = (
        events.select(image.alias("e"))
        .select(
            F.when(F.col("e.op") == "d", F.col("e.before"))
            .otherwise(F.col("e.after"))
            .alias("r"),
            F.col("e.op").alias("op"),
            F.col("e.source.lsn").alias("lsn"),
        )
        .select("r.*", "op", "lsn")
        .where("id IS NOT NULL AND lsn IS NOT NULL")
    )
    spark.createDataFrame(
        [], "id INT, lsn BIGINT, name STRING, city STRING, balance BIGINT"
    ).write.format("delta").save(path)
    if exact:
        spark.sql(
            f"CREATE TABLE delta.`{path}/_deletes` (id INT, lsn BIGINT) USING delta"
        )

    def merge(batch, batch_id):
        if exact:
            return merge_exact(batch, batch_id)
        batch.createOrReplaceTempView("batch")
        batch.sparkSession.sql(
            f"""MERGE INTO delta.`{path}` t USING (
                SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY id
                ORDER BY lsn DESC) AS n FROM batch) WHERE n = 1) s ON t.id = s.id
            WHEN MATCHED AND s.lsn > t.lsn AND s.op = 'd' THEN DELETE
            WHEN MATCHED AND s.lsn > t.lsn THEN UPDATE SET t.lsn = s.lsn,
                t.name = s.name, t.city = s.city, t.balance = s.balance
            WHEN NOT MATCHED AND s.op != 'd' THEN INSERT (id, lsn, name, city,
                balance) VALUES (s.id, s.lsn, s.name, s.city, s.balance)"""
        )

    def merge_exact(batch, batch_id):
        spark = batch.sparkSession
        latest = spark.sql(
            f"""SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY id
            ORDER BY lsn DESC) AS n FROM {{batch}}) s LEFT ANTI JOIN (SELECT id,
            max(lsn) AS gone FROM delta.`{path}/_deletes` GROUP BY id) d
            ON s.id = d.id AND s.lsn < d.gone WHERE n = 1""",
            batch=batch,
        ).persist()
        spark.conf.set("spark.databricks.delta.write.txnAppId", query.id)
        spark.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
        try:
            spark.sql(
                f"""MERGE INTO delta.`{path}` t USING {{latest}} s ON t.id = s.id
                WHEN MATCHED AND s.lsn > t.lsn AND s.op = 'd' THEN DELETE
                WHEN MATCHED AND s.lsn > t.lsn THEN UPDATE SET t.lsn = s.lsn,
                    t.name = s.name, t.city = s.city, t.balance = s.balance
                WHEN NOT MATCHED AND s.op != 'd' THEN INSERT (id, lsn, name,
                    city, balance) VALUES (s.id, s.lsn, s.name, s.city, s.balance)""",
                latest=latest,
            )
        finally:
            spark.conf.unset("spark.databricks.delta.write.txnAppId")
            spark.conf.unset("spark.databricks.delta.write.txnVersion")
        latest.where("op = 'd'").select("id", "lsn").write.format("delta").mode(
            "append"
        ).save(f"{path}/_deletes")
        latest.unpersist()

    started = time.monotonic()
    query = (
        parsed.writeStream.foreachBatch(merge)
        .trigger(availableNow=True)
        .option("checkpointLocation", str(folder / f"{name}_cp"))
        .start()
    )
    query.awaitTermination()
    durations = [p["batchDuration"] for p in query.recentProgress if p["numInputRows"]]
    report(name, folder, spark, started, durations)


def report(name, folder, spark, started, durations) -> None:
    seconds = time.monotonic() - started
    events = sum(1 for f in (folder / "events").iterdir() for _ in f.open())
    rows = spark.read.format("delta").load(str(folder / name)).count()
    print(
        json.dumps(
            {
                "run": name,
                "seconds": round(seconds, 2),
                "events": events,
                "changes_per_second": round(events / seconds),
                "rows": rows,
                "batch_ms": durations,
            }
        )
    )


def compare(folder: Path) -> None:
    spark = session()
    columns = ["id", "name", "city", "balance"]
    a = spark.read.format("delta").load(str(folder / "plugin")).select(*columns)
    different = 0
    for other in ("handwritten", "handwritten_exact"):
        if (folder / other).exists():
            b = spark.read.format("delta").load(str(folder / other)).select(*columns)
            different += a.exceptAll(b).count() + b.exceptAll(a).count()
            print(
                json.dumps(
                    {"against": other, "rows": a.count(), "differing": different}
                )
            )
    sys.exit(1 if different else 0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "what",
        choices=["make", "plugin", "handwritten", "handwritten_exact", "compare"],
    )
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--keys", type=int, default=100000)
    parser.add_argument("--snapshot", action="store_true")
    parser.add_argument("--scd-type", type=int, default=1)
    args = parser.parse_args()
    if args.what == "make":
        make(args.folder, args.files, args.events, args.keys, args.snapshot)
        return
    if args.what != "compare":
        for own in (args.what, f"{args.what}_cp", f"{args.what}_streams"):
            shutil.rmtree(args.folder / own, ignore_errors=True)
    {
        "plugin": lambda folder: plugin(folder, args.scd_type),
        "handwritten": handwritten,
        "handwritten_exact": lambda folder: handwritten(folder, exact=True),
        "compare": compare,
    }[args.what](args.folder)


if __name__ == "__main__":
    main()
