"""Time-ordered, TLC-shaped trips as JSON lines files, for the benchmarks.

Each file holds the next slice of event time (dropoffs in order, give or take a
few minutes, as a real feed delivers them), so the watermark moves file by
file. About 0.3 % of the trips break expectations (negative fares and
totals, as TLC's refunds do), so the quarantine path does real work too.

    python benchmarks/trips.py OUT_DIR --rows 1000000 --files 20
"""

from __future__ import annotations

import argparse
import itertools
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

EVENT_TIME_START = pd.Timestamp("2024-03-01 00:00:00")
# A busy month of green-taxi trips spans about this much event time per 1 M rows.
SPAN_PER_MILLION_ROWS = pd.Timedelta(days=30)
OUT_OF_ORDER_SECONDS = 300
REFUND_SHARE = 0.003
ZONE_COUNT = 265


def trips(rows: int, seed: int = 9) -> pd.DataFrame:
    """``rows`` trips in dropoff order (with jitter), every TLC green-trip field."""
    rng = np.random.default_rng(seed)
    span = SPAN_PER_MILLION_ROWS.total_seconds() * rows / 1_000_000
    offsets = np.sort(rng.uniform(0, span, rows))
    offsets += rng.uniform(-OUT_OF_ORDER_SECONDS, OUT_OF_ORDER_SECONDS, rows)
    dropoff = EVENT_TIME_START + pd.to_timedelta(
        np.clip(offsets, 0, None).round(), unit="s"
    )
    distance = rng.gamma(1.6, 1.8, rows).round(2)
    # At 6 to 30 mph, as the expectations' speed rule allows.
    seconds = np.maximum(120, (distance / rng.uniform(6, 30, rows) * 3600).round())
    pickup = dropoff - pd.to_timedelta(seconds, unit="s")

    fare = (2.5 + 2.5 * distance + rng.uniform(0, 4, rows)).round(2)
    extra = rng.choice([0.0, 0.5, 1.0], rows)
    tip = (fare * rng.choice([0.0, 0.0, 0.15, 0.2], rows)).round(2)
    tolls = np.where(rng.random(rows) < 0.05, 6.55, 0.0)
    congestion = np.where(rng.random(rows) < 0.3, 2.75, 0.0)
    total = (fare + extra + 0.5 + tip + tolls + 0.3 + congestion).round(2)
    refund = rng.random(rows) < REFUND_SHARE
    fare, total = np.where(refund, -fare, fare), np.where(refund, -total, total)

    def codes(choices, weights=None):
        return pd.array(rng.choice(choices, rows, p=weights), dtype="Int64")

    passengers = codes([1, 1, 1, 1, 2, 3, 5, 6])
    passengers[rng.random(rows) < 0.05] = pd.NA  # street-hail apps leave it empty
    return pd.DataFrame(
        {
            "VendorID": codes([1, 2], [0.2, 0.8]),
            "lpep_pickup_datetime": pickup.strftime("%Y-%m-%d %H:%M:%S"),
            "lpep_dropoff_datetime": dropoff.strftime("%Y-%m-%d %H:%M:%S"),
            "store_and_fwd_flag": rng.choice(["N"] * 49 + ["Y"], rows),
            "RatecodeID": codes([1, 1, 1, 1, 1, 1, 1, 1, 2, 5]),
            "PULocationID": codes(np.arange(1, ZONE_COUNT + 1)),
            "DOLocationID": codes(np.arange(1, ZONE_COUNT + 1)),
            "passenger_count": passengers,
            "trip_distance": distance,
            "fare_amount": fare,
            "extra": extra,
            "mta_tax": 0.5,
            "tip_amount": tip,
            "tolls_amount": tolls,
            "ehail_fee": np.nan,
            "improvement_surcharge": 0.3,
            "total_amount": total,
            "payment_type": codes([1, 2, 3, 4], [0.55, 0.43, 0.01, 0.01]),
            "trip_type": codes([1, 2], [0.97, 0.03]),
            "congestion_surcharge": congestion,
        }
    )


def write_files(frame: pd.DataFrame, folder: Path, files: int) -> list[Path]:
    """Writes ``frame`` as ``files`` JSON lines files, in event-time order.

    Files are written under a hidden name and renamed when complete, and their
    modification times are one second apart in order, which is the order in
    which Spark's file source reads them.
    """
    folder.mkdir(parents=True, exist_ok=True)
    paths, now = [], time.time()
    bounds = np.linspace(0, len(frame), files + 1).astype(int)
    for index, (start, stop) in enumerate(itertools.pairwise(bounds)):
        part = frame.iloc[start:stop]
        path = folder / f"trips-{index:04d}.json"
        partial = folder / f".{path.name}.tmp"
        part.to_json(partial, orient="records", lines=True)
        partial.replace(path)
        stamp = now - (files - index)
        os.utime(path, (stamp, stamp))
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=20)
    args = parser.parse_args()
    paths = write_files(trips(args.rows), args.out_dir, args.files)
    print(f"{args.rows} trips in {len(paths)} files in {args.out_dir}")


if __name__ == "__main__":
    main()
