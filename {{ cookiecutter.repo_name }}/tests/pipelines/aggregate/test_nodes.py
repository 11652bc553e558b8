from datetime import datetime

from {{ cookiecutter.python_package }}.pipelines.aggregate.nodes import (
    select_rejected_trips,
    select_valid_trips,
    summarise_hourly_by_borough,
)

SUMMARY = {"window_duration": "1 hour", "watermark_delay": "10 minutes"}
VALID_TRIPS = (
    "lpep_dropoff_datetime TIMESTAMP, PULocationID INT, passenger_count INT,"
    " trip_distance DOUBLE, fare_amount DOUBLE, total_amount DOUBLE"
)
ZONES = [{"LocationID": 1, "Borough": "Manhattan"}]


def at(hour: int, minute: int = 0) -> datetime:
    return datetime(2024, 3, 1, hour, minute)


# The README's example.
def test_a_window_waits_for_the_watermark_to_pass_its_end(stream_test):
    summary = stream_test(
        summarise_hourly_by_borough,
        streams={"valid_trips": VALID_TRIPS},  # the schema, as DDL
        static={"taxi_zones": ZONES, "summary": SUMMARY},
    )
    first = summary.step(valid_trips=[(at(6, 5), 1, 2, 1.0, 10.0, 12.0)])
    assert (first.rows, first.watermark) == ([], at(5, 55))
    second = summary.step(valid_trips=[(at(7, 15), 1, 1, 2.0, 20.0, 22.0)])
    assert [(r.window_start, r.trip_count) for r in second.rows] == [(at(6), 1)]


def test_summary_per_hour_and_pickup_borough(spark):
    trips = spark.createDataFrame(
        [
            (datetime(2024, 3, 1, 6, 5), 1, 1, 1.5, 10.0, 12.0),
            (datetime(2024, 3, 1, 6, 59, 59), 1, None, 2.5, 20.0, 26.0),
            (datetime(2024, 3, 1, 7, 0), 1, 3, 4.0, 30.0, 33.0),
            (datetime(2024, 3, 1, 7, 30), 2, 2, 1.0, 5.0, 7.0),
            (datetime(2024, 3, 1, 7, 45), 77, 4, 3.0, 8.0, 9.0),
        ],
        "lpep_dropoff_datetime TIMESTAMP, PULocationID INT, passenger_count INT,"
        " trip_distance DOUBLE, fare_amount DOUBLE, total_amount DOUBLE",
    )
    zones = spark.createDataFrame(
        [(1, "Manhattan"), (2, "Queens")], "LocationID INT, Borough STRING"
    )

    rows = summarise_hourly_by_borough(trips, zones, SUMMARY).orderBy(
        "window_start", "pickup_borough"
    )

    assert [tuple(row) for row in rows.collect()] == [
        (
            datetime(2024, 3, 1, 6),
            datetime(2024, 3, 1, 7),
            "Manhattan",
            2,
            1.0,
            4.0,
            2.0,
            30.0,
            15.0,
            38.0,
            19.0,
        ),
        (
            datetime(2024, 3, 1, 7),
            datetime(2024, 3, 1, 8),
            "Manhattan",
            1,
            3.0,
            4.0,
            4.0,
            30.0,
            30.0,
            33.0,
            33.0,
        ),
        (
            datetime(2024, 3, 1, 7),
            datetime(2024, 3, 1, 8),
            "Queens",
            1,
            2.0,
            1.0,
            1.0,
            5.0,
            5.0,
            7.0,
            7.0,
        ),
        (
            datetime(2024, 3, 1, 7),
            datetime(2024, 3, 1, 8),
            "Unknown",
            1,
            4.0,
            3.0,
            3.0,
            8.0,
            8.0,
            9.0,
            9.0,
        ),
    ]


def test_valid_trips_reach_the_summary_rejected_ones_the_quarantine(spark):
    bronze = spark.createDataFrame(
        [
            (1, None, None),
            (2, "negative fare_amount", '{"fare_amount": -5}'),
            (3, None, None),
        ],
        "PULocationID INT, rejection_reason STRING, raw_payload STRING",
    )

    valid = select_valid_trips(bronze)

    assert valid.columns == ["PULocationID"]
    assert sorted(row.PULocationID for row in valid.collect()) == [1, 3]
    quarantined = select_rejected_trips(bronze)
    assert quarantined.columns == bronze.columns
    assert quarantined.collect() == [(2, "negative fare_amount", '{"fare_amount": -5}')]
