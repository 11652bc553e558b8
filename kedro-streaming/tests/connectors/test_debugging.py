"""Spark's console and memory sinks as catalog entries: a run through the
hooks writes them, and what they cannot do is refused before start."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from kedro.io import DataCatalog
from kedro.pipeline import node, pipeline
from kedro.runner import SequentialRunner
from kedro_streaming import SparkStreamingDataset, StreamingConfigError
from pyspark.sql import functions as F

from tests.helpers import DATASET, SOURCE, registered, streaming_hooks


@pytest.fixture(autouse=True)
def in_a_folder_of_its_own(tmp_path, monkeypatch):
    """The run's state (data/streams) in the test's folder."""
    monkeypatch.chdir(tmp_path)


def debugging_sink(file_format: str, name: str, folder: Path, **save_args) -> dict:
    return {
        "type": DATASET,
        "file_format": file_format,
        "save_args": {"checkpoint": str(folder / "checkpoints" / name), **save_args},
    }


def test_a_run_writes_its_memory_and_console_sinks(spark, tmp_path, caplog):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "0.json").write_text('{"id": 1}\n{"id": 2}\n{"id": 3}\n')
    catalog = DataCatalog.from_config(
        {
            "in": {**SOURCE, "filepath": str(tmp_path / "in")},
            "doubled_seen": debugging_sink("memory", "doubled_seen", tmp_path),
            "doubled_shown": debugging_sink(
                "console", "doubled_shown", tmp_path, numRows=5
            ),
        }
    )

    def doubled(frame):
        return frame.withColumn("twice", F.col("id") * 2)

    nodes = pipeline(
        [
            node(doubled, "in", "doubled_seen", name="seen"),
            node(doubled, "in", "doubled_shown", name="shown"),
        ]
    )
    hooks = streaming_hooks(metrics_port=0, trigger="available_now")
    hooks.before_pipeline_run({}, nodes, catalog)
    SequentialRunner().run(nodes, catalog, registered(hooks))
    with caplog.at_level(logging.INFO, logger="kedro_streaming.queries"):
        hooks.after_pipeline_run({})

    # The memory sink's table is named after the query: the sink's name.
    rows = spark.table("doubled_seen").orderBy("id").collect()
    assert [tuple(row) for row in rows] == [(1, 2), (2, 4), (3, 6)]
    # The console sink prints in the JVM's own stdout, which a test does not
    # capture: its query says where it wrote, and how many rows.
    shown = catalog["doubled_shown"].query.lastProgress["sink"]["description"]
    assert shown.startswith("org.apache.spark.sql.execution.streaming")
    assert "Console" in shown
    assert "Query doubled_shown ended: 1 batches, 3 rows in, 3 written" in caplog.text


@pytest.mark.parametrize(
    ("entry", "direction", "problem"),
    [
        pytest.param(
            {"file_format": "memory", "save_args": {"output_mode": "update"}},
            "sink",
            "has output_mode 'update', which a memory sink does not support: use "
            "append or complete",
            id="memory in update mode",
        ),
        pytest.param(
            {"file_format": "console", "filepath": "data/shown"},
            "sink",
            "has a filepath, which a console sink does not write to: remove it",
            id="console with a filepath",
        ),
        pytest.param(
            {"file_format": "memory"},
            "source",
            "is a memory sink, which keeps nothing a stream can read: read the "
            "table the stream writes instead, or write it to a file or Delta sink",
            id="memory read as a stream",
        ),
    ],
)
def test_what_a_debugging_sink_cannot_do_is_refused(entry, direction, problem):
    save_args = {"checkpoint": "data/checkpoints/x", **entry.pop("save_args", {})}
    dataset = SparkStreamingDataset(**entry, save_args=save_args)
    problems = (
        dataset.sink_problems() if direction == "sink" else dataset.source_problems()
    )
    assert problems == [problem]


def test_a_console_option_misspelt_is_named_before_start(spark, tmp_path):
    (tmp_path / "in").mkdir()
    catalog = DataCatalog.from_config(
        {
            "in": {**SOURCE, "filepath": str(tmp_path / "in")},
            "shown": debugging_sink("console", "shown", tmp_path, numRow=5),
        }
    )
    nodes = pipeline([node(lambda frame: frame, "in", "shown", name="show")])
    hooks = streaming_hooks(metrics_port=0, trigger="available_now")
    with pytest.raises(StreamingConfigError) as raised:
        hooks.before_pipeline_run({}, nodes, catalog)
    assert (
        f"'shown' `numRow` in its save_args is not a console sink option of Spark "
        f"{spark.version}: did you mean `numRows`?" in str(raised.value)
    )


def test_a_memory_sink_read_by_a_query_of_the_same_run_is_refused(tmp_path):
    (tmp_path / "in").mkdir()
    catalog = DataCatalog.from_config(
        {
            "in": {**SOURCE, "filepath": str(tmp_path / "in")},
            "seen": debugging_sink("memory", "seen", tmp_path),
            "report": {
                "type": DATASET,
                "filepath": str(tmp_path / "report"),
                "file_format": "parquet",
                "save_args": {"checkpoint": str(tmp_path / "checkpoints" / "report")},
            },
        }
    )
    nodes = pipeline(
        [
            node(lambda frame: frame, "in", "seen", name="see"),
            node(lambda frame: frame, "seen", "report", name="report"),
        ]
    )
    hooks = streaming_hooks(metrics_port=0, trigger="available_now")
    with pytest.raises(StreamingConfigError) as raised:
        hooks.before_pipeline_run({}, nodes, catalog)
    assert (
        "'seen' is a memory sink, which keeps nothing a stream can read: read the "
        "table the stream writes instead, or write it to a file or Delta sink"
    ) in str(raised.value)
