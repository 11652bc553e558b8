"""Runs the pipelines on the bundled example data, bounded, in one process."""

import shutil
from datetime import datetime
from pathlib import Path

import pytest
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project

from tools import trips

PROJECT_ROOT = Path(__file__).resolve().parents[1]
FILES, TRIPS_PER_FILE, INVALID_PER_FILE, LATE_FILES = 8, 60, 5, 5


@pytest.fixture
def project(tmp_path, monkeypatch, spark):
    shutil.copytree(PROJECT_ROOT / "conf", tmp_path / "conf")
    # The catalog's paths are relative to the working directory, but Spark's JVM
    # keeps the one it started in: make them absolute, into the copy.
    base = tmp_path / "conf/base"
    for name in ("catalog.yml", "globals.yml"):
        text = (base / name).read_text()
        text = text.replace("filepath: data/", f"filepath: {tmp_path}/data/")
        (base / name).write_text(
            text.replace("output_root: data", f"output_root: {tmp_path}/data")
        )
    # Paths in the catalog are relative to the working directory.
    monkeypatch.chdir(tmp_path)
    trips.init(files=FILES)
    bootstrap_project(PROJECT_ROOT)
    return tmp_path


def run(project, pipeline=None, **params):
    with KedroSession.create(
        project_path=PROJECT_ROOT,
        conf_source=str(project / "conf"),
        # No Prometheus endpoint: its port may be a running `kedro run`'s.
        runtime_params={"trigger": "available_now", "metrics_port": 0, **params},
    ) as session:
        session.run(pipeline_names=[pipeline] if pipeline else None)


def read(spark, name):
    return spark.read.parquet(str(Path.cwd() / "data" / name)).collect()


def assert_example_summary(spark, valid_trips, late_trips, window_hours):
    summary = read(spark, "08_reporting/hourly_borough_summary")
    # The watermark ends 10 minutes behind the last dropoff (about 10:00), so
    # the 09:00 window stays open, waiting for more data.
    windows = sorted({row.window_start for row in summary})
    assert windows == [datetime(2024, 3, 1, hour) for hour in window_hours]
    in_closed_windows = [
        trip
        for trip in valid_trips
        if trip.lpep_dropoff_datetime < datetime(2024, 3, 1, 9)
    ]
    assert sum(row.trip_count for row in summary) == len(in_closed_windows) - late_trips


def test_ingest_then_aggregate_file_by_file(project, spark):
    # One file per micro-batch, as when files arrive one at a time: the
    # watermark advances file by file and drops the trips that come too late.
    run(project, "ingest", max_bytes_per_trigger=1)
    run(project, "aggregate", max_bytes_per_trigger=1)

    bronze = read(spark, "02_intermediate/bronze_trips")
    valid = [row for row in bronze if row.rejection_reason is None]
    # Every input line is in bronze once, valid or with its reason; the one
    # extra rejected record is the truncated line of the third file.
    assert len(valid) == FILES * (TRIPS_PER_FILE - INVALID_PER_FILE)
    assert len(bronze) - len(valid) == FILES * INVALID_PER_FILE + 1
    # Two trips of each of the last five files arrive after their window closed.
    assert_example_summary(
        spark, valid, late_trips=2 * LATE_FILES, window_hours=(6, 7, 8)
    )

    # The quarantine table holds exactly bronze's rejected records.
    quarantined = read(spark, "02_intermediate/quarantined_trips")
    assert sorted(map(repr, quarantined)) == sorted(
        repr(row) for row in bronze if row.rejection_reason is not None
    )

    # A second bounded run finds nothing new and writes nothing twice.
    run(project, "ingest")
    assert len(read(spark, "02_intermediate/bronze_trips")) == len(bronze)


def test_default_run_holds_aggregate_until_ingest_has_history(project, spark):
    run(project)
    bronze = read(spark, "02_intermediate/bronze_trips")
    # The files already there make one micro-batch: no trip is late within it,
    # and the 05:00 window of the earliest late trips is summarised too.
    valid = [row for row in bronze if row.rejection_reason is None]
    assert_example_summary(spark, valid, late_trips=0, window_hours=(5, 6, 7, 8))
