"""File sources and sinks checked before start: a project moved with its
checkpoints, and a misspelt checkpoint named alone."""

import json
import shutil

import pytest
from kedro.io import DataCatalog
from kedro.pipeline import Pipeline, node
from kedro_streaming import StreamingConfigError
from kedro_streaming._checks.checks import check_before_spark, check_configuration
from kedro_streaming._checks.spec import RunSpec


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
    # Where laptops keep projects: a space and non-ASCII letters (Spark's
    # logs escape the space in their URIs).
    here, there = tmp_path / "My Streams" / "Données été", tmp_path / "there"
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


def test_a_query_reading_another_query_s_sink_resumes_and_is_refused_once_moved(
    spark, tmp_path
):
    """A query split in two: ``merged`` reads ``copied``'s sink back as a
    stream, with ``events``. Each of its checkpoint's sources must lie in a
    folder it reads, the sink read back included."""
    # Where laptops keep projects: a space and non-ASCII letters (Spark's
    # logs escape the space in their URIs).
    here, there = tmp_path / "My Streams" / "Données été", tmp_path / "there"
    config = entries(here)
    config["events"] = {**config["landing"], "filepath": str(here / "data/events")}
    config["merged"] = {
        **config["copied"],
        "filepath": str(here / "data/merged"),
        "save_args": {"checkpoint": str(here / "data/checkpoints/merged")},
    }
    for folder, ids in (("landing", [1, 2]), ("events", [3])):
        (here / "data" / folder).mkdir(parents=True)
        (here / "data" / folder / "0.json").write_text(
            "".join(f'{{"id": {i}}}\n' for i in ids)
        )

    def copy(landing):
        return landing

    def merge(copied, events):
        return copied.unionByName(events)

    pipeline = Pipeline(
        [
            node(copy, "landing", "copied", name="copy"),
            node(merge, ["copied", "events"], "merged", name="merge"),
        ]
    )

    def check(root):
        catalog = DataCatalog.from_config(
            json.loads(
                json.dumps(config, ensure_ascii=False).replace(str(here), str(root))
            )
        )
        settings = {"state_dir": str(root / "state")}
        check_before_spark(RunSpec.read(catalog, pipeline, settings))
        return catalog

    catalog = check(here)
    for sink, inputs, function in (
        ("copied", ["landing"], copy),
        ("merged", ["copied", "events"], merge),
    ):
        for _ in range(2):  # the second run resumes its checkpoint
            check(here)
            frames = [catalog[name].load() for name in inputs]
            catalog[sink].start(
                function(*frames), trigger={"availableNow": True}
            ).awaitTermination()
    assert sorted(spark.read.parquet(str(here / "data/merged")).collect()) == [
        (1,),
        (2,),
        (3,),
    ]

    # The same folder through a symlink (a linked home, a mounted volume).
    link = tmp_path / "linked"
    link.symlink_to(here, target_is_directory=True)
    check(link)

    shutil.copytree(here, there)
    with pytest.raises(StreamingConfigError) as raised:
        check(there)
    moved = (
        "the project (or its data) moved with its checkpoints, which keep "
        "absolute paths, and Spark would fail at the first batch. Start the query "
        "afresh here with `kedro streams reset {}`, or run it where it was"
    )
    sink_moved = (
        "the project (or its data) moved, and Spark's file sink keeps absolute "
        "paths, so a stream over it would fail. Start it afresh here with `kedro "
        "streams reset {}`, or run it where it was"
    )
    old, new = here / "data", there / "data"
    assert str(raised.value).splitlines() == [
        "Streaming configuration in conf/ cannot work:",
        f"  - 'copied' has a checkpoint that read '{old}/landing', not "
        f"'{new}/landing': " + moved.format("copied"),
        f"  - 'copied' has a log that names files in '{old}/copied', not in its "
        f"folder '{new}/copied': " + sink_moved.format("copied"),
        f"  - 'merged' has a checkpoint that read '{old}/copied' and "
        f"'{old}/events', not '{new}/events' or '{new}/copied': "
        + moved.format("merged"),
        f"  - 'merged' has a log that names files in '{old}/merged', not in its "
        f"folder '{new}/merged': " + sink_moved.format("merged"),
    ]
