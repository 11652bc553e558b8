"""The ingest from Kafka written by hand in PySpark: avro_ingest.py's baseline.

What a data engineer would write without Kedro: read the trips topic as a
bounded stream (availableNow, the project's maxOffsetsPerTrigger), decode
each value (JSON, or Avro after Confluent's 5-byte frame, with the subject's
latest schema) into typed columns beside the Kafka ones, and append them to a
parquet table. The Spark settings of the generated project's spark.yml.

    python benchmarks/handwritten_kafka.py PROJECT_DIR OUT_DIR TOPIC json|avro [REGISTRY_URL]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from urllib.request import urlopen

import yaml
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

# The datetimes arrive as epoch milliseconds (pandas' to_json).
TIMES = ("lpep_pickup_datetime", "lpep_dropoff_datetime")
TRIP_SCHEMA = (
    "VendorID INT, lpep_pickup_datetime LONG, lpep_dropoff_datetime LONG, "
    "store_and_fwd_flag STRING, RatecodeID INT, PULocationID INT, DOLocationID INT, "
    "passenger_count INT, trip_distance DOUBLE, fare_amount DOUBLE, extra DOUBLE, "
    "mta_tax DOUBLE, tip_amount DOUBLE, tolls_amount DOUBLE, ehail_fee DOUBLE, "
    "improvement_surcharge DOUBLE, total_amount DOUBLE, payment_type INT, "
    "trip_type INT, congestion_surcharge DOUBLE"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("project", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("topic")
    parser.add_argument("format", choices=("json", "avro"))
    parser.add_argument("registry_url", nargs="?")
    args = parser.parse_args()

    spark_conf = yaml.safe_load((args.project / "conf/base/spark.yml").read_text())
    spark = SparkSession.builder.config(
        map={k: str(v) for k, v in spark_conf.items()}
    ).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    started = time.monotonic()
    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", "localhost:9092")
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 50000)
        .load()
    )
    # Decoded once into a struct column, then its fields: selecting each field
    # straight from the decoding expression would decode it once per field.
    if args.format == "json":
        decoded = F.from_json(F.col("value").cast("string"), TRIP_SCHEMA)
        names = [part.split()[0] for part in TRIP_SCHEMA.split(", ")]
    else:
        from pyspark.sql.avro.functions import from_avro

        subject = f"{args.registry_url}/subjects/{args.topic}-value/versions/latest"
        with urlopen(subject) as answer:
            schema = json.load(answer)["schema"]
        decoded = from_avro(F.expr("substring(value, 6)"), schema)
        names = [field["name"] for field in json.loads(schema)["fields"]]
    kafka = ["topic", "partition", "offset", "timestamp"]
    trips = raw.select(decoded.alias("trip"), *kafka).select(
        *[
            F.timestamp_millis(F.col("trip")[name]).alias(name)
            if args.format == "json" and name in TIMES
            else F.col("trip")[name].alias(name)
            for name in names
        ],
        *kafka,
    )
    query = (
        trips.writeStream.format("parquet")
        .option("checkpointLocation", str(args.out / "checkpoint"))
        .trigger(availableNow=True)
        .start(str(args.out / "bronze"))
    )
    query.awaitTermination()
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    print(f"ingest: {rows} rows in {time.monotonic() - started:.2f} s")
    spark.stop()


if __name__ == "__main__":
    main()
