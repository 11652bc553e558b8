import json

from kedro_streaming import SparkStreamingDataset
from kedro_streaming.warmup import stand_ins, warm_up
from pyspark.sql import functions as F


def test_the_twin_runs_the_query_plan_on_no_rows_and_reads_no_source(spark, tmp_path):
    source = tmp_path / "landing"
    source.mkdir()
    (source / "part-0.json").write_text(json.dumps({"id": 1, "zone": 7}) + "\n")
    zones = tmp_path / "zones"
    spark.createDataFrame([(7, "Queens")], "zone INT, borough STRING").write.parquet(
        str(zones)
    )
    dataset = SparkStreamingDataset(
        filepath=str(source),
        file_format="json",
        load_args={"schema": "id INT, zone INT"},
    )

    def node(records, lookup):
        return records.join(F.broadcast(lookup), "zone", "left").where("id > 0")

    (stand_in,) = stand_ins({"records": dataset}).values()
    twin = node(stand_in, spark.read.parquet(str(zones)))
    seconds = warm_up(twin, runs=2)

    assert not stand_in.isStreaming
    assert stand_in.schema == dataset.load().schema
    assert twin.collect() == []
    plan = twin._jdf.queryExecution().executedPlan().toString()
    # The query's own operators are there to plan and compile (an empty
    # LocalRelation would have folded them away), and its source is not read.
    assert "BroadcastHashJoin" in plan
    assert "Filter" in plan
    assert "WholeStageCodegen" in plan or "*(" in plan
    # The lookup is read as each batch reads it; the source (json) is not.
    assert plan.count("FileScan") == 1
    assert "FileScan parquet" in plan
    assert seconds > 0
