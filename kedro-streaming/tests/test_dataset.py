"""SparkStreamingDataset: sources, sinks, triggers, names and secrets."""

import json

from kedro_streaming import SparkStreamingDataset

FOREACH_BATCH_ROWS: list[int] = []


def count_batch(batch, batch_id):
    FOREACH_BATCH_ROWS.append(batch.count())


def write_json_lines(folder, name, records):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("\n".join(json.dumps(r) for r in records) + "\n")


def source(folder):
    return SparkStreamingDataset(
        filepath=str(folder), file_format="json", load_args={"schema": "id INT"}
    )


def test_saving_twice_keeps_checkpoint_mode_trigger_and_name(spark, tmp_path):
    landing, checkpoint = tmp_path / "landing", tmp_path / "checkpoint"
    save_args = {
        "output_mode": "append",
        "checkpoint": str(checkpoint),
        "trigger": {"availableNow": True},
        "query_name": "ids",
    }
    sink = SparkStreamingDataset(
        filepath=str(tmp_path / "sink"), file_format="parquet", save_args=save_args
    )

    for batch in range(2):
        write_json_lines(landing, f"{batch}.json", [{"id": batch}])
        sink.save(source(landing).load())
        assert sink.query.name == "ids"
        assert sink.query.awaitTermination(120), "availableNow must end the query"
        assert sink.query.exception() is None

    # Saving leaves the configuration as it was: the second save is the same.
    assert sink._describe()["save_args"] == save_args
    assert (checkpoint / "commits" / "1").exists()
    ids = sorted(r.id for r in spark.read.parquet(str(tmp_path / "sink")).collect())
    assert ids == [0, 1]


def test_formats_without_path_and_foreach_batch(spark, tmp_path):
    rate = SparkStreamingDataset(file_format="rate", load_args={"rowsPerSecond": 5})
    assert rate.load().isStreaming

    write_json_lines(tmp_path / "landing", "0.json", [{"id": 1}, {"id": 2}])
    sink = SparkStreamingDataset(
        save_args={
            "checkpoint": str(tmp_path / "checkpoint"),
            "trigger": {"availableNow": True},
            "foreach_batch": f"{__name__}:count_batch",
        }
    )
    sink.save(source(tmp_path / "landing").load())
    sink.query.awaitTermination(120)
    assert sink.query.exception() is None
    assert FOREACH_BATCH_ROWS == [2]


def test_sink_problems_and_secrets_never_described():
    sink = SparkStreamingDataset(
        file_format="kafka",
        save_args={"output_mode": "upsert", "trigger": {"every": "1 minute"}},
        credentials={"kafka.sasl.jaas.config": "... password='hunter2';"},
    )
    problems = " | ".join(sink.sink_problems())
    assert "has no checkpoint" in problems
    assert "output_mode 'upsert'" in problems
    assert "trigger {'every': '1 minute'}" in problems
    assert "hunter2" not in str(sink._describe())
    assert "hunter2" not in repr(sink)


def test_start_takes_the_callers_trigger_and_name_and_save_adds_no_query(
    spark, tmp_path
):
    write_json_lines(tmp_path / "landing", "0.json", [{"id": 1}])
    own = {"processingTime": "1 hour"}
    sink = SparkStreamingDataset(
        filepath=str(tmp_path / "sink"),
        file_format="parquet",
        save_args={
            "checkpoint": str(tmp_path / "checkpoint"),
            "trigger": own,
            "query_name": "own",
        },
    )
    data = source(tmp_path / "landing").load()
    try:
        query = sink.start(data, trigger={"availableNow": True}, query_name="run")
        sink.save(data)  # what Kedro does after the hooks have started the query
        assert sink.query is query and query.name == "run"
        assert query.awaitTermination(120) and query.exception() is None
        assert sink.trigger == own
        assert [q.name for q in spark.streams.active if q.name in ("run", "own")] == []
    finally:
        for active in spark.streams.active:
            if active.name in ("run", "own"):
                active.stop()
