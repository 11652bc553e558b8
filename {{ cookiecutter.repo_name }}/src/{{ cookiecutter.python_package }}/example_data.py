"""Deterministic example data: NYC green-taxi style trips and a zone lookup.

The trips exercise what a stream meets in practice: several hours of event
time, events out of order, events later than the watermark, nulls, datetimes
as ISO-8601 strings or epoch milliseconds, and a few invalid records.

Commands (run from the project root)::

    python -m {{ cookiecutter.python_package }}.example_data init      # zone lookup + 8 trip files
    python -m {{ cookiecutter.python_package }}.example_data produce   # more files, one every 10 s

Standard library only, so that it also runs while the project is created.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

LANDING_DIR = Path("data/01_raw/trips_landing")
ZONES_FILE = Path("data/01_raw/taxi_zone_lookup.csv")
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
                _times(rng, span_start - timedelta(minutes=rng.uniform(1, 6)))
            )
    if file_index >= FIRST_FILE_WITH_LATE_TRIPS:
        # Beyond the watermark: their window has been emitted already.
        for record in records[:2]:
            record.update(
                _times(rng, span_start - timedelta(minutes=rng.uniform(120, 150)))
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
        **_times(rng, dropoff),
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


def _times(rng: random.Random, dropoff: datetime) -> dict[str, object]:
    dropoff = dropoff.replace(microsecond=0)
    pickup = dropoff - timedelta(seconds=rng.randint(180, 2_700))
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
    landing_dir.mkdir(parents=True, exist_ok=True)
    path = landing_dir / f"trips-{file_index:04d}.json"
    partial = landing_dir / f".{path.name}.tmp"
    partial.write_text("\n".join(trip_records(file_index, seed=seed)) + "\n")
    partial.replace(path)
    return path


def init(
    landing_dir: Path = LANDING_DIR, zones_file: Path = ZONES_FILE, files: int = 8
) -> None:
    """Writes the zone lookup and the first ``files`` landing files.

    File modification times are one second apart, in file order: Spark's file
    source reads files in that order, which keeps runs reproducible.
    """
    write_zones(zones_file)
    now = time.time()
    for index in range(files):
        path = write_trip_file(landing_dir, index)
        stamp = now - (files - index)
        os.utime(path, (stamp, stamp))


def produce(landing_dir: Path, files: int, interval: float) -> Iterator[Path]:
    """Drops the next ``files`` landing files, one every ``interval`` seconds."""
    existing = sorted(landing_dir.glob("trips-*.json"))
    start = int(existing[-1].stem.split("-")[1]) + 1 if existing else 0
    for index in range(start, start + files):
        yield write_trip_file(landing_dir, index)
        if index < start + files - 1:
            time.sleep(interval)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    init_cmd = commands.add_parser(
        "init", help="write the zone lookup and 8 trip files"
    )
    init_cmd.add_argument("--files", type=int, default=8)
    produce_cmd = commands.add_parser("produce", help="drop trip files over time")
    produce_cmd.add_argument(
        "--files", type=int, default=6, help="how many files (default 6)"
    )
    produce_cmd.add_argument(
        "--interval",
        type=float,
        default=10.0,
        help="seconds between files (default 10)",
    )
    for command in (init_cmd, produce_cmd):
        command.add_argument("--landing-dir", type=Path, default=LANDING_DIR)
    args = parser.parse_args(argv)

    if args.command == "init":
        init(args.landing_dir, files=args.files)
        sys.stdout.write(
            f"Wrote {ZONES_FILE} and {args.files} files to {args.landing_dir}\n"
        )
    else:
        for path in produce(args.landing_dir, args.files, args.interval):
            sys.stdout.write(f"{path}\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
