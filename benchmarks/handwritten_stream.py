"""The project's ``bronze_trips`` from Kafka, by hand, until SIGTERM: restart.py's baseline.

What a data engineer would write without Kedro to run the same query: the
trips topic read with the options of the project's ``raw_trips`` (its
``--env``, e.g. restart.py's ``bench-kafka``), the project's own nodes
(``parse_trips``, ``check_trips`` with its declared rules) called by hand,
appended to a parquet table with a checkpoint, a micro-batch every
``--interval``; the Spark settings of the environment's spark.yml over
base's. SIGTERM stops the query and the session, as ``kedro run`` does.

    python benchmarks/handwritten_stream.py PROJECT_DIR OUT_DIR --env bench-kafka
        [--interval "1 second"] [--class-archive JSA]
"""

from __future__ import annotations

import argparse
import signal
import time
from pathlib import Path

import yaml
from project_code import config_loader, node_modules
from pyspark.sql import SparkSession

ZONE_SCHEMA = "LocationID INT, Borough STRING, Zone STRING, service_zone STRING"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("project", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--env", default="kafka")
    parser.add_argument("--interval", default="1 second")
    parser.add_argument(
        "--class-archive",
        type=Path,
        help="map this archive of Spark's classes, as the project's runs do",
    )
    args = parser.parse_args()
    launched = time.monotonic()

    conf = yaml.safe_load((args.project / "conf/base/spark.yml").read_text())
    env_spark = args.project / "conf" / args.env / "spark.yml"
    if env_spark.exists():
        conf.update(yaml.safe_load(env_spark.read_text()))
    if args.class_archive:
        conf["spark.driver.extraJavaOptions"] += (
            f" -XX:SharedArchiveFile={args.class_archive} -Xlog:cds*=off"
        )
    spark = SparkSession.builder.config(
        map={k: str(v).strip() for k, v in conf.items()}
    ).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")

    loader = config_loader(args.project, args.env)
    source = loader["catalog"]["raw_trips"]["load_args"]
    (nodes,) = node_modules(args.project, "ingest")
    raw = spark.readStream.format("kafka").options(**source).load()
    zones = spark.read.csv(
        str(args.project / "data/01_raw/taxi_zone_lookup.csv"),
        header=True,
        schema=ZONE_SCHEMA,
    )
    bronze = nodes.check_trips(
        nodes.parse_trips(raw), zones, loader["parameters"]["trip_expectations"]
    )
    query = (
        bronze.writeStream.format("parquet")
        .outputMode("append")
        .option("checkpointLocation", str(args.out / "checkpoints/bronze"))
        .trigger(processingTime=args.interval)
        .start(str(args.out / "bronze"))
    )
    print(f"query started {time.monotonic() - launched:.2f} s after launch", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: query.stop())
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
