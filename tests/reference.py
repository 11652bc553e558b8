"""An independent computation of what the example pipelines must produce.

Plain Python and pandas, written from the documented rules (the README of the
generated project), not from its code: records are parsed, validated, and
summarised per dropoff window and pickup borough with Spark's watermark
semantics replayed micro-batch by micro-batch.

The rules are this module's own; only their settings (the validation limits,
the window and the watermark delay) come from the generated project's
``conf/base/parameters.yml``, through `example_settings`.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
import yaml

KINDS = {
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
REQUIRED = (
    "lpep_pickup_datetime",
    "lpep_dropoff_datetime",
    "PULocationID",
    "DOLocationID",
    "fare_amount",
    "total_amount",
)
NON_NEGATIVE = (
    "trip_distance",
    "fare_amount",
    "extra",
    "mta_tax",
    "tip_amount",
    "tolls_amount",
    "improvement_surcharge",
    "total_amount",
    "congestion_surcharge",
)
BOUNDED = ("fare_amount", "total_amount")
SUMMARY_COLUMNS = [
    "trip_count",
    "avg_passengers",
    "total_distance",
    "avg_distance",
    "total_fare",
    "avg_fare",
    "total_amount",
    "avg_amount",
]


EPOCH = datetime(1970, 1, 1)
DURATION_UNITS = {
    "millisecond": timedelta(milliseconds=1),
    "second": timedelta(seconds=1),
    "minute": timedelta(minutes=1),
    "hour": timedelta(hours=1),
    "day": timedelta(days=1),
    "week": timedelta(weeks=1),
}


@dataclass(frozen=True)
class ExampleSettings:
    """The example's settings, as the generated project configures them."""

    max_trip_hours: float
    max_amount: float
    window: timedelta
    watermark_delay: timedelta


def example_settings(project: Path) -> ExampleSettings:
    """The settings in ``project``'s ``conf/base/parameters.yml``."""
    parameters = yaml.safe_load((project / "conf/base/parameters.yml").read_text())
    validation, summary = parameters["validation"], parameters["summary"]
    return ExampleSettings(
        max_trip_hours=validation["max_trip_hours"],
        max_amount=validation["max_amount"],
        window=parse_duration(summary["window_duration"]),
        watermark_delay=parse_duration(summary["watermark_delay"]),
    )


def parse_duration(text: str) -> timedelta:
    """A duration as Spark reads one: "1 hour", "10 minutes", "1 hour 30 minutes"."""
    words = text.strip().lower()
    if not re.fullmatch(r"(\d+(\.\d+)?\s*[a-z]+\s*)+", words):
        raise ValueError(f"not a duration: {text!r}")
    total = timedelta()
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]+)", words):
        if unit.removesuffix("s") not in DURATION_UNITS:
            raise ValueError(f"unknown unit {unit!r} in {text!r}")
        total += float(number) * DURATION_UNITS[unit.removesuffix("s")]
    return total


class _Tombstone(str):
    """A Kafka message without a value: an empty record with no payload."""


TOMBSTONE = _Tombstone("empty record")


def json_landing_batches(folder: Path) -> list[list[dict | str]]:
    """One batch per file, in file-time order."""
    files = sorted(folder.glob("*.json"), key=lambda p: (p.stat().st_mtime, p.name))
    return [[decode(line) for line in text_lines(path.read_bytes())] for path in files]


def message_batches(messages: list[bytes | None], size: int) -> list[list[dict | str]]:
    """Kafka messages of one partition, decoded, in micro-batches of ``size``."""
    decoded = [decode(message) for message in messages]
    return [decoded[start : start + size] for start in range(0, len(decoded), size)]


def text_lines(data: bytes) -> list[bytes]:
    """Lines as Spark's text source splits them: at \\n, \\r\\n or \\r."""
    lines = re.split(rb"\r\n|\r|\n", data)
    return lines[:-1] if lines and lines[-1] == b"" else lines


def decode(value: bytes | None) -> dict | str:
    """A line or message as the text fields of its JSON record, or why it is none."""
    if value is None:
        return TOMBSTONE
    if not value.strip():
        return "empty record"
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8 text (raw_payload is base64)"
    try:
        # Keep numbers as their text, as a string-typed Spark schema does.
        record = json.loads(text, parse_float=str, parse_int=str)
    except json.JSONDecodeError:
        return "not a valid record"
    return _as_text(record) if isinstance(record, dict) else "not a valid record"


def csv_batch(path: Path) -> list[dict]:
    with path.open(newline="") as handle:
        return [
            {k: (v if v != "" else None) for k, v in row.items()}
            for row in csv.DictReader(handle)
        ]


def zone_boroughs(path: Path) -> dict[int, str]:
    with path.open(newline="") as handle:
        return {
            int(row["LocationID"]): row["Borough"] for row in csv.DictReader(handle)
        }


def _as_text(record: dict) -> dict:
    def text(value):
        if value is None:
            return None
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (dict, list)):
            return json.dumps(value, separators=(",", ":"))
        return str(value)

    return {name: text(record.get(name)) for name in KINDS}


def _typed(text: str | None, kind: str):
    if text is None:
        return None
    text = text.strip(" ")
    if kind == "string":
        return text or None
    if kind == "timestamp":
        return _timestamp(text)
    return _number(text, integer=kind == "int")


def _timestamp(text: str) -> datetime | None:
    if re.fullmatch(r"-?[0-9]{1,15}", text):
        return EPOCH + timedelta(milliseconds=int(text))
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
    return moment


def _number(text: str, integer: bool) -> float | int | None:
    try:
        number = float(text)
    except ValueError:
        return None
    if integer:
        return (
            int(number)
            if math.isfinite(number) and number == math.floor(number)
            else None
        )
    return number


def check(
    record: dict | str, zone_ids: set[int], settings: ExampleSettings
) -> tuple[dict | None, str | None]:
    """The typed trip and ``None``, or ``None`` and the rejection reason."""
    if isinstance(record, str):
        return None, record
    trip = {name: _typed(record.get(name), kind) for name, kind in KINDS.items()}
    reasons = [f"missing {n}" for n in REQUIRED if record.get(n) is None]
    reasons += [
        f"invalid {n}" for n in KINDS if record.get(n) is not None and trip[n] is None
    ]
    pickup, dropoff = trip["lpep_pickup_datetime"], trip["lpep_dropoff_datetime"]
    if pickup and dropoff and dropoff < pickup:
        reasons.append("dropoff before pickup")
    max_hours, max_amount = settings.max_trip_hours, settings.max_amount
    if pickup and dropoff and (dropoff - pickup).total_seconds() > max_hours * 3600:
        reasons.append(f"trip longer than {max_hours} hours")
    reasons += [
        f"negative {n}" for n in NON_NEGATIVE if trip[n] is not None and trip[n] < 0
    ]
    reasons += [
        f"{n} above {max_amount}"
        for n in BOUNDED
        if trip[n] is not None and trip[n] > max_amount
    ]
    for name in ("PULocationID", "DOLocationID"):
        if trip[name] is not None and trip[name] not in zone_ids:
            reasons.append(f"unknown {name}")
    return (None, "; ".join(reasons)) if reasons else (trip, None)


@dataclass
class Expected:
    bronze: list[dict] = field(default_factory=list)
    rejections: Counter = field(default_factory=Counter)
    late_trips: int = 0
    tombstones: int = 0
    summary: pd.DataFrame | None = None


def expected_outputs(
    batches: list[list[dict | str]], boroughs: dict[int, str], settings: ExampleSettings
) -> Expected:
    """Replays the two pipelines over micro-batches, one batch per landing file.

    Spark's append-mode window aggregation: a window is emitted once the
    watermark (max event time so far minus the delay, advanced after each
    batch) reaches its end; a row is dropped as late when its window ended at
    or before the watermark of the batch before (the late-event watermark
    trails the eviction watermark by one batch since Spark 3.5). Windows are
    tumbling, ``settings.window`` long and aligned on the epoch, as Spark's.
    """
    window, delay = settings.window, settings.watermark_delay
    out = Expected()
    state: dict[tuple, list[dict]] = defaultdict(list)
    eviction_wm = late_wm = None
    for batch in batches:
        valid = []
        out.tombstones += sum(1 for record in batch if record is TOMBSTONE)
        for record in batch:
            trip, reason = check(record, set(boroughs), settings)
            if reason:
                out.rejections[reason] += 1
            else:
                valid.append(trip)
        out.bronze += valid
        for trip in valid:
            start = _window_start(trip["lpep_dropoff_datetime"], window)
            if late_wm is not None and start + window <= late_wm:
                out.late_trips += 1
                continue
            state[(start, boroughs.get(trip["PULocationID"], "Unknown"))].append(trip)
        if valid:
            batch_wm = max(t["lpep_dropoff_datetime"] for t in valid) - delay
            late_wm = eviction_wm
            eviction_wm = (
                batch_wm if eviction_wm is None else max(eviction_wm, batch_wm)
            )

    rows = []
    for (start, borough), trips in state.items():
        if eviction_wm is None or start + window > eviction_wm:
            continue
        passengers = [
            t["passenger_count"] for t in trips if t["passenger_count"] is not None
        ]
        rows.append(
            {
                "window_start": start,
                "window_end": start + window,
                "pickup_borough": borough,
                "trip_count": len(trips),
                "avg_passengers": sum(passengers) / len(passengers)
                if passengers
                else float("nan"),
                "total_distance": _sum(t["trip_distance"] for t in trips),
                "avg_distance": _mean(t["trip_distance"] for t in trips),
                "total_fare": sum(t["fare_amount"] for t in trips),
                "avg_fare": _mean(t["fare_amount"] for t in trips),
                "total_amount": sum(t["total_amount"] for t in trips),
                "avg_amount": _mean(t["total_amount"] for t in trips),
            }
        )
    out.summary = (
        pd.DataFrame(rows)
        .sort_values(["window_start", "pickup_borough"])
        .reset_index(drop=True)
    )
    return out


def _window_start(moment: datetime, window: timedelta) -> datetime:
    return EPOCH + (moment - EPOCH) // window * window


def _mean(values) -> float:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else float("nan")


def _sum(values) -> float:
    present = [v for v in values if v is not None]
    return sum(present) if present else float("nan")
