"""The example's taxi trips: landed as files, or sent to Kafka.

The trips exercise what a stream meets in practice: several hours of event
time, events out of order, events later than the watermark, nulls, datetimes
as ISO-8601 strings or epoch milliseconds, and a few invalid records. The same
arguments always give the same trips.

    python -m tools trips init     # zone lookup, its changes + 8 trip files
    python -m tools trips land     # more files, one every 10 s
    python -m tools trips land --rule-breakers   # trips breaking each expectation
    python -m tools trips send     # the trips as Kafka messages
    python -m tools trips watch    # the summary topic, from the start

Files need the standard library only, so that ``init`` also runs while the
project is created; Kafka needs kafka-python.
"""

from __future__ import annotations

import csv
import json
import os
import random
import shutil
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

# Their names under the environment's input_root (conf/<env>/globals.yml).
LANDING_FOLDER = "trips_landing"
ZONES_FILE_NAME = "taxi_zone_lookup.csv"
# The zone table's life as Debezium tells it (the `zones` pipeline's input):
# its rows read, then rounds of changes, written by kedro-streaming's feed.
ZONE_CHANGES_FOLDER = "zone_changes"
ZONE_CHANGE_ROUNDS = 3
LANDING_DIR = Path("data/01_raw") / LANDING_FOLDER
ZONES_FILE = Path("data/01_raw") / ZONES_FILE_NAME
EVENT_TIME_START = datetime(2024, 3, 1, 6, 0, tzinfo=timezone.utc)
# Each file holds about this much event time, so 8 files span 4 hours.
FILE_SPAN = timedelta(minutes=30)
ZONE_COUNT = 265
UNKNOWN_LOCATION_ID = 999
FIRST_FILE_WITH_LATE_TRIPS = 3
TRUNCATED_FILE = 2
NULL_SHARE = 0.05

# LocationID ranges per borough, in the spirit of the TLC table (1 = EWR,
# 264/265 = unknown / outside NYC).
_BOROUGHS = [
    (range(1, 2), "EWR", "EWR"),
    (range(2, 70), "Queens", "Boro Zone"),
    (range(70, 130), "Brooklyn", "Boro Zone"),
    (range(130, 190), "Manhattan", "Yellow Zone"),
    (range(190, 240), "Bronx", "Boro Zone"),
    (range(240, 264), "Staten Island", "Boro Zone"),
    (range(264, 265), "Unknown", "N/A"),
    (range(265, 266), "N/A", "N/A"),
]


def zone_rows() -> list[dict[str, object]]:
    """The zone lookup: LocationID, Borough, Zone, service_zone."""
    return [
        {
            "LocationID": location_id,
            "Borough": borough,
            "Zone": f"{borough} zone {location_id}",
            "service_zone": service_zone,
        }
        for ids, borough, service_zone in _BOROUGHS
        for location_id in ids
    ]


def trip_records(file_index: int, trips: int = 60, seed: int = 2024) -> list[str]:
    """The JSON lines of one landing file, the same for the same arguments.

    File ``k`` mostly holds trips dropped off in ``[k, k+1) * FILE_SPAN`` after
    ``EVENT_TIME_START``, shuffled. From the second file on, two trips arrive a
    few minutes late (within the watermark); from the fourth on, two arrive two
    hours late (beyond it); every file has five invalid records.
    """
    rng = random.Random(seed * 1_000 + file_index)
    span_start = EVENT_TIME_START + file_index * FILE_SPAN
    records = [_trip(rng, span_start + rng.random() * FILE_SPAN) for _ in range(trips)]

    if file_index >= 1:
        # Out of order, but within the 10-minute watermark: still counted.
        for record in records[2:4]:
            record.update(
                _times(
                    rng,
                    span_start - timedelta(minutes=rng.uniform(1, 6)),
                    record["trip_distance"],
                )
            )
    if file_index >= FIRST_FILE_WITH_LATE_TRIPS:
        # Beyond the watermark: their window has been emitted already.
        for record in records[:2]:
            record.update(
                _times(
                    rng,
                    span_start - timedelta(minutes=rng.uniform(120, 150)),
                    record["trip_distance"],
                )
            )

    records[5]["fare_amount"] = -abs(records[5]["fare_amount"])
    pickup, dropoff = (
        records[6]["lpep_pickup_datetime"],
        records[6]["lpep_dropoff_datetime"],
    )
    records[6]["lpep_pickup_datetime"], records[6]["lpep_dropoff_datetime"] = (
        dropoff,
        pickup,
    )
    records[7]["PULocationID"] = UNKNOWN_LOCATION_ID
    records[8]["passenger_count"] = "two"
    del records[9]["lpep_dropoff_datetime"]

    lines = [json.dumps(record) for record in records]
    rng.shuffle(lines)
    if file_index == TRUNCATED_FILE:
        # A producer that died mid-write.
        lines.append(lines[0][: len(lines[0]) // 2])
    return lines


def _trip(rng: random.Random, dropoff: datetime) -> dict[str, object]:
    distance = round(rng.uniform(0.3, 12.0), 2)
    fare = round(2.5 + 2.5 * distance + rng.uniform(0, 4), 2)
    extra = rng.choice([0.0, 0.5, 1.0])
    tip = round(rng.choice([0.0, 0.0, fare * 0.15, fare * 0.2]), 2)
    tolls = rng.choice([0.0] * 9 + [6.55])
    congestion = None if rng.random() < NULL_SHARE else rng.choice([0.0, 2.75])
    total = round(fare + extra + 0.5 + tip + tolls + 0.3 + (congestion or 0.0), 2)
    return {
        "VendorID": rng.choice([1, 2]),
        **_times(rng, dropoff, distance),
        "store_and_fwd_flag": None
        if rng.random() < NULL_SHARE
        else rng.choice(["N"] * 19 + ["Y"]),
        "RatecodeID": 1,
        "PULocationID": rng.randint(1, ZONE_COUNT),
        "DOLocationID": rng.randint(1, ZONE_COUNT),
        "passenger_count": None
        if rng.random() < NULL_SHARE
        else rng.choice([1, 1, 1, 2, 3, 5]),
        "trip_distance": distance,
        "fare_amount": fare,
        "extra": extra,
        "mta_tax": 0.5,
        "tip_amount": tip,
        "tolls_amount": tolls,
        "ehail_fee": None,
        "improvement_surcharge": 0.3,
        "total_amount": total,
        "payment_type": rng.choice([1, 2]),
        "trip_type": 1,
        "congestion_surcharge": congestion,
    }


def _times(rng: random.Random, dropoff: datetime, distance: float) -> dict[str, object]:
    """Pickup and dropoff of a trip of ``distance`` miles at 6 to 30 mph."""
    dropoff = dropoff.replace(microsecond=0)
    seconds = max(120, round(distance / rng.uniform(6, 30) * 3600))
    pickup = dropoff - timedelta(seconds=seconds)
    style = rng.choice(["iso", "space", "epoch_ms"])
    return {
        "lpep_pickup_datetime": _format(pickup, style),
        "lpep_dropoff_datetime": _format(dropoff, style),
    }


def _format(moment: datetime, style: str) -> object:
    if style == "epoch_ms":
        return int(moment.timestamp() * 1000)
    if style == "iso":
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def write_zones(path: Path = ZONES_FILE) -> Path:
    """Writes the zone lookup CSV."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(
            handle, fieldnames=["LocationID", "Borough", "Zone", "service_zone"]
        )
        writer.writeheader()
        writer.writerows(zone_rows())
    return path


def write_trip_file(landing_dir: Path, file_index: int, seed: int = 2024) -> Path:
    """Writes landing file ``file_index`` atomically, as a producer should.

    Spark's file source picks up any file it sees, so the file is written
    under a hidden name (ignored by Spark) and renamed when complete.
    """
    path = landing_dir / f"trips-{file_index:04d}.json"
    return _write_lines(path, trip_records(file_index, seed=seed))


def write_rule_breakers(landing_dir: Path) -> Path:
    """Lands ``rule_breaking_trips`` as one file, after every file there."""
    return _write_lines(
        landing_dir / f"rule-breakers-{int(time.time())}.json",
        [json.dumps(trip) for trip in rule_breaking_trips()],
    )


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.tmp")
    partial.write_text("\n".join(lines) + "\n")
    partial.replace(path)
    return path


def init(
    landing_dir: Path = LANDING_DIR,
    zones_file: Path = ZONES_FILE,
    files: int = 8,
    write_feed: Callable[..., object] | None = None,
) -> None:
    """Writes the zone lookup, its changes (with ``write_feed``, the
    plugin's ``kedro streams feed``) and the first ``files`` landing files.

    File modification times are one second apart, in file order: Spark's file
    source reads files in that order, which keeps runs reproducible.
    """
    write_zones(zones_file)
    if write_feed is not None:
        changes = zones_file.parent / ZONE_CHANGES_FOLDER
        shutil.rmtree(changes, ignore_errors=True)
        write_feed(zones_file, ["LocationID"], changes, rounds=ZONE_CHANGE_ROUNDS)
        _in_order(sorted(changes.glob("*.json")))
    _in_order([write_trip_file(landing_dir, index) for index in range(files)])


def _in_order(paths: list[Path]) -> None:
    """Modification times one second apart, in the order of ``paths``."""
    now = time.time()
    for index, path in enumerate(paths):
        stamp = now - (len(paths) - index)
        os.utime(path, (stamp, stamp))


def land(landing_dir: Path, files: int, interval: float) -> Iterator[Path]:
    """Drops the next ``files`` landing files, one every ``interval`` seconds."""
    existing = sorted(landing_dir.glob("trips-*.json"))
    start = int(existing[-1].stem.split("-")[1]) + 1 if existing else 0
    for index in range(start, start + files):
        yield write_trip_file(landing_dir, index)
        if index < start + files - 1:
            time.sleep(interval)


def rule_breaking_trips() -> list[dict[str, object]]:
    """Trips that each break rules of conf/base/parameters_expectations.yml.

    Every shipped rule is broken by at least one of them, most by exactly one
    trip that breaks nothing else; land or send them to see each rule at work.
    Datetimes are placed around today, which the window rules are relative to.
    """
    now = datetime.now(timezone.utc).replace(microsecond=0, tzinfo=None)
    pickup = now - timedelta(hours=3)
    good = {
        **_trip(random.Random(7), pickup + timedelta(minutes=20)),
        "lpep_pickup_datetime": _format(pickup, "space"),
        "lpep_dropoff_datetime": _format(pickup + timedelta(minutes=20), "space"),
        "trip_distance": 3.0,
        "passenger_count": 1,
        "congestion_surcharge": 0.0,
    }
    good["total_amount"] = round(
        sum(
            good[name]
            for name in (
                "fare_amount",
                "extra",
                "mta_tax",
                "tip_amount",
                "tolls_amount",
                "improvement_surcharge",
            )
        ),
        2,
    )
    # The window of the shipped rules: today -10 years to tomorrow, at midnight.
    today = now.date()
    leap_day = (today.month, today.day) == (2, 29)
    window_start = datetime(today.year - 10, today.month, 28 if leap_day else today.day)
    window_end = datetime.combine(today + timedelta(days=1), datetime.min.time())

    def times(start: datetime, minutes: float) -> dict[str, object]:
        return {
            "lpep_pickup_datetime": _format(start, "space"),
            "lpep_dropoff_datetime": _format(
                start + timedelta(minutes=minutes), "space"
            ),
        }

    changes: list[dict[str, object]] = [
        {"lpep_pickup_datetime": None},
        {"lpep_dropoff_datetime": None},
        {"PULocationID": None},
        {"DOLocationID": None},
        {"fare_amount": None},
        {"total_amount": None},
        {"VendorID": 3},
        {"RatecodeID": 7},
        {"payment_type": 9},
        {"trip_type": 3},
        {"store_and_fwd_flag": "X"},
        {"PULocationID": UNKNOWN_LOCATION_ID},
        {"DOLocationID": UNKNOWN_LOCATION_ID},
        # Across the window's ends (10 years ago, tomorrow): one time out each.
        times(window_start - timedelta(minutes=10), 20),
        times(window_end - timedelta(minutes=10), 20),
        times(pickup, -15),
        times(pickup - timedelta(hours=30), 26 * 60),
        {"passenger_count": 12},
        {"passenger_count": 0},  # a warning: kept as valid
        {"trip_distance": 350.0, **times(pickup - timedelta(hours=6), 300)},
        {"trip_distance": 40.0},  # 40 miles in 20 minutes: 120 mph
        {"fare_amount": -5.0},
        {"fare_amount": 20000.0, "total_amount": 20000.0},
        {"extra": 150.0, "total_amount": 500.0},
        {"mta_tax": 12.0, "total_amount": 500.0},
        {"tip_amount": 1500.0, "total_amount": 2000.0},
        {"tolls_amount": 1200.0, "total_amount": 2000.0},
        {"ehail_fee": 150.0, "total_amount": 500.0},
        {"improvement_surcharge": 11.0, "total_amount": 500.0},
        {"congestion_surcharge": 11.0, "total_amount": 500.0},
        {"total_amount": 1.0},  # less than the fare
        # A one-letter flag holding 5,000 characters: its code and the size.
        {"store_and_fwd_flag": "N" * 5000},
    ]
    return [{**good, **change} for change in changes]


def bundled_messages(files: int) -> Iterator[str]:
    """The JSON lines of the first ``files`` example files, bad records included."""
    for index in range(files):
        yield from trip_records(index)


def file_messages(path: Path) -> Iterator[str]:
    """Rows of a TLC CSV or parquet file as JSON objects.

    Parquet is read with pandas, whose ``to_json`` writes datetimes as epoch
    milliseconds; ``parse_trips`` reads both those and ISO-8601 strings.
    """
    if path.suffix == ".parquet":
        import pandas as pd  # noqa: PLC0415 - only this source needs pandas

        yield from (
            pd.read_parquet(path).to_json(orient="records", lines=True).splitlines()
        )
        return
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            yield json.dumps(
                {key: value if value != "" else None for key, value in row.items()}
            )


# The trips as Avro records (`send --format avro`), one field per TLC field,
# each nullable as in TLC's files. Version 2 adds the field TLC added in 2025:
# a backward-compatible change, which readers of version 1 take too.
_TRIP_FIELDS = {
    "VendorID": "int",
    "lpep_pickup_datetime": "timestamp",
    "lpep_dropoff_datetime": "timestamp",
    "store_and_fwd_flag": "string",
    "RatecodeID": "int",
    "PULocationID": "int",
    "DOLocationID": "int",
    "passenger_count": "int",
    "trip_distance": "double",
    "fare_amount": "double",
    "extra": "double",
    "mta_tax": "double",
    "tip_amount": "double",
    "tolls_amount": "double",
    "ehail_fee": "double",
    "improvement_surcharge": "double",
    "total_amount": "double",
    "payment_type": "int",
    "trip_type": "int",
    "congestion_surcharge": "double",
}
_AVRO_TYPES = {
    "int": "int",
    "double": "double",
    "string": "string",
    "timestamp": {"type": "long", "logicalType": "timestamp-millis"},
}
AVRO_VERSIONS = (1, 2)
_CBD_FEE_FROM_VERSION = 2


def trip_avro_schema(version: int) -> str:
    """The Avro schema of a trip, as the registry takes it (JSON text)."""
    fields = dict(_TRIP_FIELDS)
    if version >= _CBD_FEE_FROM_VERSION:
        fields["cbd_congestion_fee"] = "double"
    return json.dumps(
        {
            "type": "record",
            "name": "GreenTaxiTrip",
            "namespace": "nyc.tlc",
            "fields": [
                {"name": name, "type": ["null", _AVRO_TYPES[kind]], "default": None}
                for name, kind in fields.items()
            ],
        }
    )


def avro_trip(line: str, version: int) -> dict[str, object]:
    """A JSON line's trip as an Avro record of ``version``.

    Raises:
        ValueError: The line is not a trip that fits the schema (a field of the
            wrong type, or not JSON at all), naming why.
    """
    record = json.loads(line)
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    trip: dict[str, object] = {}
    for name, kind in _TRIP_FIELDS.items():
        value = record.get(name)
        if value is None:
            trip[name] = None
        elif kind == "timestamp":
            trip[name] = _epoch_millis(value)
        elif kind == "int" and isinstance(value, int) and not isinstance(value, bool):
            trip[name] = value
        elif kind == "double" and isinstance(value, (int, float)):
            trip[name] = float(value)
        elif kind == "string" and isinstance(value, str):
            trip[name] = value
        else:
            raise ValueError(f"{name} {value!r} is not {kind}")
    if version >= _CBD_FEE_FROM_VERSION:
        # TLC's charge for entering Manhattan's congestion zone, from 2025.
        manhattan = (trip["PULocationID"] or 0) in range(130, 190)
        trip["cbd_congestion_fee"] = 0.75 if manhattan else 0.0
    return trip


def _epoch_millis(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)  # as the pipeline reads it
        return int(moment.timestamp() * 1000)
    raise ValueError(f"{value!r} is not a datetime")


def message_key(line: str) -> bytes | None:
    """The trip's PULocationID, so that a zone's trips share a partition."""
    try:
        location = json.loads(line).get("PULocationID")
    except (ValueError, AttributeError):
        return None
    return None if location is None else str(location).encode()
