from datetime import datetime

from {{ cookiecutter.python_package }}.pipelines.live.nodes import (
    summarise_hourly_by_current_borough,
)

SUMMARY = {"window_duration": "1 hour", "watermark_delay": "10 minutes"}


def test_each_trip_takes_its_zones_borough_now_a_deleted_zone_unknown(spark):
    trips = spark.createDataFrame(
        [
            (datetime(2024, 3, 1, 6, 5), 7, 1, 1.5, 10.0, 12.0),
            (datetime(2024, 3, 1, 6, 20), 7, 3, 2.5, 20.0, 26.0),
            (datetime(2024, 3, 1, 6, 40), 9, 2, 1.0, 5.0, 7.0),
        ],
        "lpep_dropoff_datetime TIMESTAMP, PULocationID INT, passenger_count INT,"
        " trip_distance DOUBLE, fare_amount DOUBLE, total_amount DOUBLE",
    )
    # Zone 7 moved to Brooklyn; zone 9 was deleted.
    zones = spark.createDataFrame(
        [(7, "Brooklyn", 12), (8, "Queens", 3)],
        "LocationID INT, Borough STRING, _lsn BIGINT",
    )

    rows = summarise_hourly_by_current_borough(trips, zones, SUMMARY)

    assert sorted(
        (r.pickup_borough, r.trip_count, r.total_fare) for r in rows.collect()
    ) == [("Brooklyn", 2, 30.0), ("Unknown", 1, 5.0)]
