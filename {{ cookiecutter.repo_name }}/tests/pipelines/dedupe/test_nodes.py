import json
from datetime import datetime, timedelta

from {{ cookiecutter.python_package }}.pipelines.dedupe.nodes import unique_trips

KAFKA = "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP"
DEDUPE = {"copies_within": "10 minutes"}


def at(minute: int) -> datetime:
    return datetime(2024, 3, 1, 10) + timedelta(minutes=minute)


def message(offset: int, entered: int, copy_offset: int) -> tuple:
    """A checked trip's message: the trip that entered at ``offset`` of the
    trips topic at ``at(entered)``, read at ``copy_offset``."""
    origin = {
        "kafka_topic": "taxi-trips",
        "kafka_partition": 0,
        "kafka_offset": offset,
        "kafka_timestamp": at(entered).isoformat() + "Z",
        "fare_amount": 9.5,
    }
    value = json.dumps(origin).encode()
    return (b"1", value, "checked", 0, copy_offset, at(entered))


def kept(step) -> list:
    return [(row.kafka_offset, row.message_offset) for row in step.rows]


def test_each_trip_is_kept_once_whatever_its_copies(stream_test):
    dedupe = stream_test(
        unique_trips, streams={"trip_messages": KAFKA}, static={"dedupe": DEDUPE}
    )
    # Trips 0 and 1, then, after a crash, both written again with trip 2.
    first = dedupe.step(trip_messages=[message(0, 0, 0), message(1, 1, 1)])
    replay = dedupe.step(
        trip_messages=[message(0, 0, 2), message(1, 1, 3), message(2, 2, 4)]
    )
    # A message that is not a checked trip is kept, once per copy, with no
    # origin; trip 3, 30 minutes on, moves the watermark to 10:20.
    other = (b"1", b"not json", "checked", 0, 5, at(25))
    later = dedupe.step(trip_messages=[other, message(3, 30, 6)])
    # A copy of trip 0 now: behind the watermark, dropped and counted as late.
    late = dedupe.step(trip_messages=[message(0, 0, 7)])

    assert kept(first) == [(0, 0), (1, 1)]
    assert kept(replay) == [(2, 4)]
    assert kept(later) == [(None, 5), (3, 6)]
    assert later.rows[0].message == "not json"
    assert kept(late) == []
    assert late.late_state_rows_dropped == 1
    # Trips 0 to 2 left the state as the watermark passed them; what stays:
    # trip 3 and the unparsed message (10:25, until 10:35).
    assert [(op.name, op.rows) for op in later.operators] == [
        ("dedupeWithinWatermark", 2)
    ]
