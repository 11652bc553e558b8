from {{ cookiecutter.python_package }}.pipelines.ingest.nodes import SOURCE_COLUMNS, TRIP_COLUMNS
from {{ cookiecutter.python_package }}.pipelines.realtime.nodes import (
    RAW_PAYLOAD_CHARACTERS,
    trip_messages,
)

TOPICS = {"valid": "checked", "rejected": "rejected"}
CHECKED = ", ".join(
    [
        *(f"{name} {kind}" for name, kind in TRIP_COLUMNS.items()),
        "rejection_reason STRING, warnings STRING, raw_payload STRING",
        "source_file STRING, kafka_topic STRING, kafka_partition INT",
        "kafka_offset BIGINT, kafka_timestamp TIMESTAMP",
    ]
)
CHECKED_NAMES = [column.split()[0] for column in CHECKED.split(", ")]


def checked_trip(**values) -> dict:
    row = {name: None for name in [*TRIP_COLUMNS, "rejection_reason", "warnings"]}
    row.update(raw_payload=None, source_file=None, kafka_topic="trips")
    row.update(kafka_partition=0, kafka_timestamp=None)
    return {**row, **values}


def test_valid_trips_with_their_zones_rejected_ones_with_their_reasons(spark):
    long_payload = "x" * (RAW_PAYLOAD_CHARACTERS + 5)
    rows = [
        checked_trip(PULocationID=1, DOLocationID=2, fare_amount=9.5, kafka_offset=0),
        checked_trip(PULocationID=1, DOLocationID=99, kafka_offset=1),
        checked_trip(
            rejection_reason="not a valid record", raw_payload="{oops", kafka_offset=2
        ),
        checked_trip(
            PULocationID=2,
            rejection_reason="record_size",
            raw_payload=long_payload,
            kafka_offset=3,
        ),
    ]
    checked = spark.createDataFrame(
        [tuple(row[name] for name in CHECKED_NAMES) for row in rows],
        CHECKED,
    )
    zones = spark.createDataFrame(
        [
            (1, "Manhattan", "Alphabet City", "Yellow Zone"),
            (2, "Queens", "Astoria", "Boro Zone"),
        ],
        "LocationID INT, Borough STRING, Zone STRING, service_zone STRING",
    )

    out = trip_messages(checked, zones, TOPICS)
    # Each row's own topic's record is set, the other is null.
    messages = [
        (row.key, row.value[row.topic].asDict(recursive=True), row.topic)
        for row in out.collect()
        if row.value["checked" if row.topic == "rejected" else "rejected"] is None
    ]
    messages.sort(key=lambda message: message[1]["kafka_offset"])
    assert len(messages) == len(rows)

    assert [(key, topic) for key, _, topic in messages] == [
        ("1", "checked"),
        ("1", "checked"),
        (None, "rejected"),
        ("2", "rejected"),
    ]
    first, unknown_zone, unparsed, too_long = (value for _, value, _ in messages)
    # A valid trip: every checked column, null or not, and both ends' zones.
    assert set(first) == {
        *CHECKED_NAMES,
        "pickup_borough",
        "pickup_zone",
        "dropoff_borough",
        "dropoff_zone",
    }
    assert first["fare_amount"] == 9.5 and first["ehail_fee"] is None
    assert (first["pickup_borough"], first["pickup_zone"]) == (
        "Manhattan",
        "Alphabet City",
    )
    assert (first["dropoff_borough"], first["dropoff_zone"]) == ("Queens", "Astoria")
    assert unknown_zone["dropoff_borough"] is None
    # A rejected one: its reason, its payload (cut to what Kafka takes), its origin.
    origin = [name for name in SOURCE_COLUMNS if name != "source_file"]
    assert unparsed == {
        "rejection_reason": "not a valid record",
        "warnings": None,
        "raw_payload": "{oops",
        "raw_payload_truncated": False,
        **{name: unparsed[name] for name in origin},
    }
    assert (unparsed["kafka_topic"], unparsed["kafka_offset"]) == ("trips", 2)
    assert too_long["raw_payload"] == long_payload[:RAW_PAYLOAD_CHARACTERS]
    assert too_long["raw_payload_truncated"] is True
