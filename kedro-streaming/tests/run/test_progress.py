"""A query's rows in are the rows it read, whatever Spark's reader skipped."""

import pandas as pd
from kedro.io import DataCatalog
from kedro_streaming._observe.progress import (
    metric_row,
    reports_newest_first,
    rows_read,
)
from pyspark.sql import functions as F


def test_rows_in_are_the_rows_read_when_a_filter_skips_row_groups(spark, tmp_path):
    """A quarantine over a checked table: one file of valid records (its
    `reason` column all null), one with a rejected record. Spark hands the
    query's `reason IS NOT NULL` to its parquet reader, which skips the first
    file's row group unread; the query still read all five records."""
    table = tmp_path / "checked"
    table.mkdir()
    for number, reasons in enumerate([[None, None, None], [None, "too hot"]]):
        pd.DataFrame({"id": range(len(reasons)), "reason": reasons}).astype(
            {"reason": "string"}
        ).to_parquet(table / f"part-{number}.parquet")
    catalog = DataCatalog.from_config(
        {
            name: {
                "type": "kedro_streaming.SparkStreamingDataset",
                "filepath": str(tmp_path / name),
                "file_format": "parquet",
                **(
                    {"load_args": {"schema": "id BIGINT, reason STRING"}}
                    if name == "checked"
                    else {}
                ),
                **(
                    {"save_args": {"checkpoint": str(tmp_path / "checkpoint")}}
                    if name != "checked"
                    else {}
                ),
            }
            for name in ("checked", "quarantined")
        }
    )
    rejected = catalog["checked"].load().filter(F.col("reason").isNotNull())
    query = catalog["quarantined"].start(rejected, trigger={"availableNow": True})
    query.awaitTermination()
    report = next(r for r in reports_newest_first(query) if r["numInputRows"])
    metrics = {name: metric_row(row) for name, row in report["observedMetrics"].items()}
    assert rows_read(metrics, report["sources"]) == 5
    assert metrics["rows_written"] == {"rows": 1}

    # The same query by hand: Spark's count is the rows its reader handed on,
    # the skipped row group aside (what `rows in` showed before 0.10.0).
    by_hand = (
        spark.readStream.schema("id BIGINT, reason STRING")
        .parquet(str(table))
        .filter(F.col("reason").isNotNull())
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "by-hand"))
        .trigger(availableNow=True)
        .start()
    )
    by_hand.awaitTermination()
    assert max(r["numInputRows"] for r in reports_newest_first(by_hand)) == 2
