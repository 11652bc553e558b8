"""The aggregate pipeline as a stream, micro-batch by micro-batch."""

from datetime import datetime

import pytest

from {{ cookiecutter.python_package }}.pipelines.aggregate.pipeline import create_pipeline
from {{ cookiecutter.python_package }}.pipelines.live.pipeline import (
    create_pipeline as create_live_pipeline,
)

# The columns of bronze_trips the pipelines read.
BRONZE = (
    "lpep_dropoff_datetime TIMESTAMP, PULocationID INT, passenger_count INT,"
    " trip_distance DOUBLE, fare_amount DOUBLE, total_amount DOUBLE,"
    " rejection_reason STRING"
)
ZONES = [
    {"LocationID": 1, "Borough": "Manhattan"},
    {"LocationID": 2, "Borough": "Queens"},
]
SUMMARY = {"window_duration": "1 hour", "watermark_delay": "10 minutes"}


def trip(hour: int, minute: int, zone: int = 1, fare: float = 10.0, rejected=None):
    """A trip dropped off on 2024-03-01 at ``hour:minute``, 2 passengers, 1 mile."""
    at = datetime(2024, 3, 1, hour, minute)
    return (at, zone, 2, 1.0, fare, fare + 2, rejected)


def summary_row(hour: int, borough: str, fares: list[float]) -> tuple:
    """The summary's row for the window starting at ``hour``."""
    count, fare = len(fares), sum(fares)
    return (
        datetime(2024, 3, 1, hour),
        datetime(2024, 3, 1, hour + 1),
        borough,
        count,
        2.0,
        float(count),
        1.0,
        fare,
        fare / count,
        fare + 2 * count,
        fare / count + 2,
    )


@pytest.fixture
def aggregate(stream_test):
    return stream_test(
        create_pipeline(),
        streams={"bronze_trips": BRONZE},
        static={"taxi_zones": ZONES, "params:summary": SUMMARY},
    )


def test_a_window_is_emitted_once_the_watermark_passes_its_end(aggregate):
    opened = aggregate.step(bronze_trips=[trip(6, 5)])["hourly_borough_summary"]
    assert opened.rows == []
    assert opened.watermark == datetime(2024, 3, 1, 5, 55)

    # 06:55: the 06:00 window could still get trips.
    held = aggregate.step(bronze_trips=[trip(7, 5, fare=20.0)])
    assert held["hourly_borough_summary"].rows == []
    assert held["hourly_borough_summary"].watermark == datetime(2024, 3, 1, 6, 55)

    closed = aggregate.step(bronze_trips=[trip(7, 15, zone=2)])
    summary = closed["hourly_borough_summary"]
    assert summary.watermark == datetime(2024, 3, 1, 7, 5)
    assert summary.rows == [summary_row(6, "Manhattan", [10.0])]
    # Emitted by the batch without data that follows the watermark's move.
    assert [len(rows) for rows in summary.batches] == [0, 1]
    assert summary.state_rows == 2  # the 07:00 window, Manhattan and Queens


def test_a_late_trip_is_dropped_and_counted_a_rejected_one_quarantined(aggregate):
    aggregate.run(
        [{"bronze_trips": [trip(6, 5)]}, {"bronze_trips": [trip(7, 15)]}]
    )  # the watermark is 07:05: the 06:00 window is out

    late = aggregate.step(
        bronze_trips=[
            trip(6, 50, fare=99.0),
            trip(6, 55, zone=2, fare=99.0),
            trip(7, 20, fare=30.0),
            trip(7, 25, rejected="trip_speed"),
        ]
    )

    summary = late["hourly_borough_summary"]
    assert summary.input_rows == 4
    assert summary.late_state_rows_dropped == 2  # (06:00, Manhattan), (06:00, Queens)
    assert summary.rows == []
    assert [row.rejection_reason for row in late["quarantined_trips"].rows] == [
        "trip_speed"
    ]
    # The 07:00 window holds the trips that were in time, and only those.
    final = aggregate.step(bronze_trips=[trip(8, 30)])["hourly_borough_summary"]
    assert final.rows == [summary_row(7, "Manhattan", [10.0, 30.0])]


def test_update_mode_writes_each_batchs_changed_windows(stream_test):
    # The summary's nodes; the zone table as the `zones` nodes keep it.
    summary_nodes = create_live_pipeline().only_nodes_with_outputs(
        "live_valid_trips", "live_borough_summary"
    )
    live = stream_test(
        summary_nodes,
        streams={"bronze_trips": BRONZE},
        static={"current_zones@table": ZONES, "params:summary": SUMMARY},
        output_mode="update",
    )

    first, second, third = live.run(
        [
            {"bronze_trips": [trip(6, 5), trip(6, 10, zone=2)]},
            {"bronze_trips": [trip(6, 20, fare=20.0)]},
            {"bronze_trips": [trip(7, 15, fare=30.0)]},
        ]
    )

    summaries = [step["live_borough_summary"] for step in (first, second, third)]
    assert summaries[0].rows == [
        summary_row(6, "Manhattan", [10.0]),
        summary_row(6, "Queens", [10.0]),
    ]
    assert summaries[1].rows == [summary_row(6, "Manhattan", [10.0, 20.0])]
    assert summaries[2].rows == [summary_row(7, "Manhattan", [30.0])]
    # Past the watermark, the 06:00 windows leave the state, final as written.
    assert [summary.state_rows for summary in summaries] == [2, 2, 1]


def test_a_restart_neither_loses_nor_repeats_a_window(aggregate):
    before = aggregate.run(
        [
            {"bronze_trips": [trip(6, 5), trip(6, 40, fare=20.0)]},
            {"bronze_trips": [trip(7, 15)]},
        ]
    )
    aggregate.restart()  # the queries built again, as by a new `kedro run`
    after = aggregate.run(
        [
            {"bronze_trips": [trip(7, 50, fare=30.0), trip(8, 20)]},
            {"bronze_trips": [trip(9, 30)]},
        ]
    )

    emitted = [
        row for step in before + after for row in step["hourly_borough_summary"].rows
    ]
    assert emitted == [
        summary_row(6, "Manhattan", [10.0, 20.0]),
        summary_row(7, "Manhattan", [10.0, 30.0]),  # 07:15 came before the restart
        summary_row(8, "Manhattan", [10.0]),
    ]


def test_a_batch_replayed_after_a_crash_emits_its_windows_again(aggregate):
    """Why the sinks commit each batch id once: Spark replays a batch whose
    commit a crash lost, and a sink that appends blindly would repeat it."""
    aggregate.run([{"bronze_trips": [trip(6, 5)]}, {"bronze_trips": [trip(7, 15)]}])
    aggregate.restart(replay_last_batch=True)

    replayed = aggregate.step()["hourly_borough_summary"]

    assert replayed.rows == [summary_row(6, "Manhattan", [10.0])]
    assert [report["batchId"] for report in replayed.progress] == [3]
