"""Runs the pipelines on the bundled example data, bounded, in one process."""

import shutil
from datetime import datetime
from pathlib import Path

import pytest
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project

from {{ cookiecutter.python_package }} import example_data

PROJECT_ROOT = Path(__file__).resolve().parents[1]
FILES, TRIPS_PER_FILE, INVALID_PER_FILE, LATE_FILES = 8, 60, 5, 5


@pytest.fixture
def project(tmp_path, monkeypatch, spark):
    shutil.copytree(PROJECT_ROOT / "conf", tmp_path / "conf")
    # Paths in the catalog are relative to the working directory.
    monkeypatch.chdir(tmp_path)
    example_data.init(files=FILES)
    bootstrap_project(PROJECT_ROOT)
    return tmp_path


def run(project, pipeline_name=None):
    with KedroSession.create(
        project_path=PROJECT_ROOT,
        conf_source=str(project / "conf"),
        runtime_params={"trigger": "available_now"},
    ) as session:
        session.run(pipeline_name=pipeline_name)


def read(spark, name):
    return spark.read.parquet(f"data/{name}").collect()


def assert_example_summary(spark, bronze):
    summary = read(spark, "08_reporting/hourly_borough_summary")
    windows = sorted({row.window_start for row in summary})
    # The watermark ends 10 minutes behind the last dropoff (about 10:00), so
    # the 09:00 window stays open, waiting for more data.
    assert windows == [datetime(2024, 3, 1, hour) for hour in (6, 7, 8)]
    in_closed_windows = [
        trip for trip in bronze if trip.lpep_dropoff_datetime < datetime(2024, 3, 1, 9)
    ]
    # Two trips of each of the last five files arrive after their window closed.
    assert sum(row.trip_count for row in summary) == len(in_closed_windows) - 2 * LATE_FILES


def test_ingest_then_aggregate(project, spark):
    run(project, "ingest")
    run(project, "aggregate")

    bronze = read(spark, "02_intermediate/bronze_trips")
    quarantined = read(spark, "02_intermediate/quarantined_trips")
    # Every input line is a bronze trip or a quarantined record; the one extra
    # quarantined record is the truncated line of the third file.
    assert len(bronze) == FILES * (TRIPS_PER_FILE - INVALID_PER_FILE)
    assert len(quarantined) == FILES * INVALID_PER_FILE + 1
    assert_example_summary(spark, bronze)

    # A second bounded run finds nothing new and writes nothing twice.
    run(project, "ingest")
    assert len(read(spark, "02_intermediate/bronze_trips")) == len(bronze)


def test_default_run_holds_aggregate_until_ingest_has_history(project, spark):
    run(project)
    assert_example_summary(spark, read(spark, "02_intermediate/bronze_trips"))
