"""Pins what SparkStreamingDataset adds to kedro-datasets' streaming dataset."""

import json

from {{ cookiecutter.python_package }}.datasets import SparkStreamingDataset

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

    # The base class pops checkpoint and output_mode on the first save.
    assert sink._save_args == save_args
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
