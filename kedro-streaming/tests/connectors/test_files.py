"""File sources and sinks checked before start: a project moved with its
checkpoints, and a misspelt checkpoint named alone."""

import shutil

import pytest
from kedro.io import DataCatalog
from kedro_streaming import StreamingConfigError
from kedro_streaming._run.checks import check_configuration


def entries(root) -> dict:
    """A JSON landing folder and the parquet sink its query writes, under ``root``."""
    return {
        "landing": {
            "type": "kedro_streaming.SparkStreamingDataset",
            "filepath": str(root / "data/landing"),
            "file_format": "json",
            "load_args": {"schema": "id INT"},
        },
        "copied": {
            "type": "kedro_streaming.SparkStreamingDataset",
            "filepath": str(root / "data/copied"),
            "file_format": "parquet",
            "save_args": {"checkpoint": str(root / "data/checkpoints/copied")},
        },
    }


def problems_of(catalog: DataCatalog) -> str:
    with pytest.raises(StreamingConfigError) as raised:
        check_configuration(
            {"copied": catalog["copied"]},
            {"landing": catalog["landing"]},
            {"landing": ["copied"]},
        )
    return str(raised.value)


def test_a_project_moved_with_its_checkpoints_is_refused_before_start(spark, tmp_path):
    here, there = tmp_path / "here", tmp_path / "there"
    (here / "data/landing").mkdir(parents=True)
    (here / "data/landing/0.json").write_text('{"id": 1}\n{"id": 2}\n')
    catalog = DataCatalog.from_config(entries(here))
    check_configuration(
        {"copied": catalog["copied"]},
        {"landing": catalog["landing"]},
        {"landing": ["copied"]},
    )  # where it was written: nothing to say
    catalog["copied"].start(
        catalog["landing"].load(), trigger={"availableNow": True}
    ).awaitTermination()
    assert sorted(spark.read.parquet(str(here / "data/copied")).collect()) == [
        (1,),
        (2,),
    ]

    shutil.copytree(here, there)
    assert problems_of(DataCatalog.from_config(entries(there))) == (
        "Streaming configuration in conf/ cannot work:\n"
        f"  - 'copied' has a checkpoint that read '{here}/data/landing', not "
        f"'{there}/data/landing': the project (or its data) moved with its "
        "checkpoints, which keep absolute paths, and Spark would fail at the first "
        "batch. Start the query afresh here with `kedro streams reset copied`, or "
        "run it where it was\n"
        f"  - 'copied' has a log that names files in '{here}/data/copied', not in "
        f"its folder '{there}/data/copied': the project (or its data) moved, and "
        "Spark's file sink keeps absolute paths, so a stream over it would fail. "
        "Start it afresh here with `kedro streams reset copied`, or run it where "
        "it was"
    )


def test_a_misspelt_checkpoint_is_the_one_problem_named(tmp_path):
    """A sink folder with batches and no checkpoint (its key misspelt): the
    fix is the key, not a reset that would delete the table."""
    (tmp_path / "data/landing").mkdir(parents=True)
    log = tmp_path / "data/copied/_spark_metadata"
    log.mkdir(parents=True)
    (log / "0").write_text("v1\n")
    config = entries(tmp_path)
    config["copied"]["save_args"] = {"checkpiont": "data/checkpoints/copied"}
    assert problems_of(DataCatalog.from_config(config)) == (
        "Streaming configuration in conf/ cannot work:\n"
        "  - 'copied' has `checkpiont` in its save_args: did you mean `checkpoint`?"
    )
