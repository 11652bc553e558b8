"""A batch of a query captured from its checkpoint (`kedro streams capture`)
and replayed through its node by the harness: the same rows as the batch
wrote, which only its state and watermark before it give."""

import json

import pytest
from kedro_streaming._checkpoint import Checkpoint
from kedro_streaming._cli.capture import capture_batch, newest_with_rows
from kedro_streaming._observe.capture import CaptureError
from kedro_streaming.testing import Incident
from pyspark.sql import Row
from pyspark.sql import functions as F

from tests.run.one_node import catalog_of, kedro_run, land, one_node

TRIPS = "id INT, fare INT, at TIMESTAMP"
SOURCES = ("trips", "more_trips")


def deduped(trips, more_trips):
    """Each trip once (by id) while within an hour of the newest, tagged with
    its source (which input a row came from shows in what is written) and
    the file it came from (which a replay cannot give as the run did)."""

    def tagged(rows, source):
        return rows.withColumns(
            {"source": F.lit(source), "file": F.input_file_name()}
        ).withWatermark("at", "10 minutes")

    return (
        tagged(trips, "trips")
        .unionByName(tagged(more_trips, "more"))
        .dropDuplicatesWithinWatermark(["id"])
    )


def trip(number: int, minute: int, fare: int) -> dict:
    return {"id": number, "fare": fare, "at": f"2024-03-01T10:{minute:02d}:00Z"}


# A file sink's batch is read back from its log in the starter's tests (a
# project's Kafka-to-files dedupe, captured and replayed by its pytest).
@pytest.mark.parametrize("sink_format", ["delta"])
def test_a_batch_replays_from_its_checkpoint_as_it_ran(spark, tmp_path, sink_format):
    """Run 1 keeps ids 1-3 (newest 10:24 and 10:25: the watermark becomes
    10:14). Run 2's batch has id 3 again (kept in the state: dropped), id 6
    at 10:02 (behind the watermark: dropped), and ids 4 and 5 (written)."""
    run = {"sources": SOURCES, "out_format": sink_format}
    land(tmp_path, "0.json", [trip(1, 1, 10), trip(2, 24, 20)], folder="trips")
    land(tmp_path, "0.json", [trip(3, 25, 30)], folder="more_trips")
    kedro_run(tmp_path, TRIPS, deduped, **run)
    land(tmp_path, "1.json", [trip(3, 25, 31), trip(4, 30, 40)], folder="trips")
    land(tmp_path, "1.json", [trip(6, 2, 60), trip(5, 31, 50)], folder="more_trips")
    kedro_run(tmp_path, TRIPS, deduped, **run)
    batches = Checkpoint(str(tmp_path / "checkpoint")).batches("commits")
    # Each run: its batch, then one without data (the watermark moved).
    assert batches == [0, 1, 2, 3]

    folder, lines = capture_batch(
        catalog_of(tmp_path, TRIPS, **run),
        one_node(deduped, SOURCES),
        "out",
        batch=2,
        folder=None,
        under=tmp_path / "My Streams" / "Données été",
        pipeline_name="dedupe",
    )

    assert folder == tmp_path / "My Streams" / "Données été" / "out_batch_2"
    assert lines == [
        "trips: 2 rows, as batch 2 read them",
        "more_trips: 2 rows, as batch 2 read them",
        f"its state before batch 2: {state_files(tmp_path, 2)} files",
        "written: 2 rows, as the sink holds them; the replay writes the same 2 "
        "rows but for file, which it gives other values (a path of the file it "
        "reads, a clock): not compared",
    ]
    incident = Incident(folder)
    inputs = {
        name: sorted(spark.read.parquet(str(folder / "inputs" / name)).collect())
        for name in SOURCES
    }
    assert {name: [row.id for row in rows] for name, rows in inputs.items()} == {
        "trips": [3, 4],
        "more_trips": [5, 6],
    }
    record = json.loads((folder / "incident.json").read_text())
    assert record["watermark_ms"] == epoch_ms("2024-03-01 10:14:00")
    expected = [
        Row(id=4, fare=40, at=timestamp("10:30"), source="trips"),
        Row(id=5, fare=50, at=timestamp("10:31"), source="more"),
    ]
    assert incident.written(spark) == expected

    replayed = incident.replay(
        spark, one_node(deduped, SOURCES), workdir=tmp_path / "r"
    )
    assert replayed.rows == expected
    assert replayed.input_rows == 4  # noqa: PLR2004 (two rows of each source)
    # Without the state before it, the batch would write id 3 again.
    assert replayed.late_state_rows_dropped == 1  # id 6, behind the watermark

    # What it should have written, edited in: the replay no longer matches.
    written = folder / "written.json"
    written.write_text(written.read_text().replace('"fare":50', '"fare":55'))
    assert [row.fare for row in incident.written(spark)] == [40, 55]


def test_a_batch_is_captured_once_and_only_if_the_checkpoint_has_it(spark, tmp_path):
    land(tmp_path, "0.json", [trip(1, 1, 10)], folder="trips")
    land(tmp_path, "0.json", [trip(2, 2, 20)], folder="more_trips")
    kedro_run(tmp_path, TRIPS, deduped, sources=SOURCES)
    arguments = {
        "folder": None,
        "under": tmp_path / "incidents",
        "pipeline_name": "dedupe",
    }
    catalog = catalog_of(tmp_path, TRIPS, sources=SOURCES)
    with pytest.raises(CaptureError) as missing:
        capture_batch(catalog, one_node(deduped, SOURCES), "out", batch=7, **arguments)
    assert str(missing.value) == (
        "'out' has no batch 7 in its checkpoint: its offsets keep batches 0 to 1."
    )
    # By default the newest batch that read rows, not the one after it that
    # only moved the watermark.
    folder, lines = capture_batch(
        catalog, one_node(deduped, SOURCES), "out", batch=None, **arguments
    )
    assert folder.name == "out_batch_0"
    assert lines[:2] == [
        "the newest batch that read or wrote rows: after it, 1 batch did neither "
        "(only the watermark moved), and would replay nothing; --batch takes "
        "another",
        "trips: 1 rows, as batch 0 read them",
    ]
    checkpoint = Checkpoint(str(tmp_path / "checkpoint"))
    # The progress log decides where it has the batch: a batch that wrote the
    # windows its state closed read nothing, and is the one to capture.
    assert newest_with_rows(checkpoint, [0, 1], {1: True}) == 1
    assert newest_with_rows(checkpoint, [0, 1], {0: True, 1: False}) == 0
    with pytest.raises(CaptureError) as again:
        capture_batch(catalog, one_node(deduped, SOURCES), "out", batch=0, **arguments)
    assert str(again.value) == (
        f"{folder} is there already: give --to another folder, or delete it"
    )


def state_files(tmp_path, batch: int) -> int:
    """The files of the checkpoint's state up to version ``batch`` (the
    state before that batch), and Spark's metadata of it."""
    state = tmp_path / "checkpoint" / "state"
    count = 0
    for path in state.rglob("*"):
        if not path.is_file() or path.name.startswith("."):
            continue
        stem = path.name.split(".")[0].split("_")[0]
        metadata = {"_metadata", "_stateSchema", "SSTs"} & set(path.parts)
        count += bool(metadata) or not stem.isdigit() or int(stem) <= batch
    return count


def timestamp(hour_minute: str):
    from datetime import datetime  # noqa: PLC0415

    hour, minute = map(int, hour_minute.split(":"))
    return datetime(2024, 3, 1, hour, minute)  # noqa: DTZ001 (the session's UTC)


def epoch_ms(moment: str) -> int:
    from datetime import datetime, timezone  # noqa: PLC0415

    return int(
        datetime.fromisoformat(moment).replace(tzinfo=timezone.utc).timestamp() * 1000
    )
