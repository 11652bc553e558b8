"""One way to say a problem: each entry's problems carry a stable id, whichever
connector finds them, and one "did you mean" names what was meant."""

from __future__ import annotations

import pytest
from kedro_streaming import SparkStreamingDataset
from kedro_streaming.problems import Problem, did_you_mean

KAFKA = {"file_format": "kafka"}
CHECKPOINT = {"checkpoint": "data/checkpoints/x"}


@pytest.mark.parametrize(
    ("entry", "direction", "ids"),
    [
        pytest.param(
            {"file_format": "parquet", "filepath": "out"},
            "sink",
            ["SINK_WITHOUT_CHECKPOINT"],
            id="a sink without checkpoint",
        ),
        pytest.param(
            {
                "file_format": "parquet",
                "filepath": "out",
                "save_args": {**CHECKPOINT, "output_mode": "update"},
            },
            "sink",
            ["SINK_ONLY_APPENDS"],
            id="a file sink in update mode",
        ),
        pytest.param(
            {
                "file_format": "parquet",
                "filepath": "out",
                "save_args": {**CHECKPOINT, "merge_on": ["id"]},
            },
            "sink",
            ["SINK_MERGE_ON_WITHOUT_DELTA"],
            id="merge_on on parquet",
        ),
        pytest.param(
            {**KAFKA, "save_args": {**CHECKPOINT, "trigger": {"realTime": "1 min"}}},
            "sink",
            ["SINK_REAL_TIME_NOT_KAFKA_UPDATE", "KAFKA_WITHOUT_BOOTSTRAP_SERVERS"],
            id="Real-Time Mode in append mode, no brokers",
        ),
        pytest.param(
            {
                "file_format": "parquet",
                "filepath": "out",
                "save_args": CHECKPOINT,
                "checkpiont": "x",
            },
            "sink",
            ["ENTRY_KEY_UNKNOWN"],
            id="a key the entry does not take",
        ),
        pytest.param(
            {
                "file_format": "parquet",
                "filepath": "out",
                "save_args": {**CHECKPOINT, "outputMode": "append"},
            },
            "sink",
            ["ENTRY_KEY_MISSPELT"],
            id="a save_args key misspelt",
        ),
        pytest.param(
            {**KAFKA, "load_args": {"subscribe": "t", "kafka.sasl.jaas.config": "s"}},
            "source",
            ["ENTRY_SECRET_OUTSIDE_CREDENTIALS", "KAFKA_WITHOUT_BOOTSTRAP_SERVERS"],
            id="a secret in load_args",
        ),
        pytest.param(
            {**KAFKA, "load_args": {"kafka.bootstrap.servers": "h:9092"}},
            "source",
            ["KAFKA_SOURCE_WITHOUT_TOPIC"],
            id="a Kafka source without topic",
        ),
        pytest.param(
            {"file_format": "text", "filepath": "."},
            "source",
            [],
            id="text lines need no schema",
        ),
        pytest.param(
            {"file_format": "json", "filepath": "."},
            "source",
            ["FILES_SOURCE_WITHOUT_SCHEMA"],
            id="JSON files without a schema",
        ),
        pytest.param(
            {"file_format": "json", "filepath": "no/such/folder"},
            "source",
            ["SOURCE_FOLDER_MISSING"],
            id="a folder that is not there",
        ),
        pytest.param(
            {"file_format": "delta", "filepath": "no/such/table"},
            "source",
            ["SOURCE_FOLDER_MISSING"],
            id="a Delta table that is not there",
        ),
        pytest.param(
            {
                "file_format": "memory",
                "save_args": {**CHECKPOINT, "output_mode": "update"},
            },
            "sink",
            ["DEBUGGING_SINK_OUTPUT_MODE"],
            id="a memory sink in update mode",
        ),
    ],
)
def test_every_problem_of_an_entry_has_a_stable_id(entry, direction, ids, tmp_path):
    dataset = SparkStreamingDataset(**entry)
    problems = (
        dataset.sink_problems() if direction == "sink" else dataset.source_problems()
    )
    assert [problem.id for problem in problems] == ids
    # The message is the cause and its fix, as before the ids.
    assert all(problem == f"{problem.cause}: {problem.fix}" for problem in problems)


@pytest.mark.parametrize(
    ("name", "known", "meant"),
    [
        pytest.param(
            "checkpiont",
            ["checkpoint", "trigger"],
            "did you mean `checkpoint`?",
            id="a typo",
        ),
        pytest.param(
            "startingoffset",
            {"startingoffsets": "startingOffsets"},
            "did you mean `startingOffsets`?",
            id="a spelling by its key",
        ),
        pytest.param("zzz", ["trigger"], "", id="nothing close"),
    ],
)
def test_one_did_you_mean(name, known, meant):
    assert did_you_mean(name, known) == meant


def test_a_problem_is_its_message():
    problem = Problem("has no checkpoint", "add one", id="SINK_WITHOUT_CHECKPOINT")
    assert f"'sink' {problem}" == "'sink' has no checkpoint: add one"
    assert (problem.cause, problem.fix, problem.id) == (
        "has no checkpoint",
        "add one",
        "SINK_WITHOUT_CHECKPOINT",
    )
