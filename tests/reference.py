"""An independent computation of what the example pipelines must produce.

Plain Python and pandas, written from the documented rules (the README of the
generated project), not from its code: records are parsed, validated, and
summarised per dropoff window and pickup borough with Spark's watermark
semantics replayed micro-batch by micro-batch.

The rules are this module's own: the expectations as shipped in
``conf/base/parameters_expectations.yml`` are written again here in plain
Python (`RULES`), and `example_settings` checks that the project declares
the same rules with the same actions. Only the window and the watermark delay
come from the generated project's ``conf/base/parameters.yml``.
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

    window: timedelta
    watermark_delay: timedelta


def example_settings(project: Path) -> ExampleSettings:
    """The settings in ``project``'s ``conf/base/parameters.yml``, once its
    expectations are known to be the ones `RULES` computes."""
    conf = project / "conf/base"
    declared = yaml.safe_load((conf / "parameters_expectations.yml").read_text())
    actions = {name: rule["action"] for name, rule in RULES.items()}
    assert {
        name: rule["action"] for name, rule in declared["trip_expectations"].items()
    } == actions, "the shipped expectations changed: update RULES in reference.py"
    assert declared["event_time_window"] == {"past": "10 YEARS", "future": "1 DAY"}
    summary = yaml.safe_load((conf / "parameters.yml").read_text())["summary"]
    return ExampleSettings(
        window=parse_duration(summary["window_duration"]),
        watermark_delay=parse_duration(summary["watermark_delay"]),
    )


def _present(value) -> bool:
    return value is not None


def _between(value, low, high) -> bool | None:
    return None if value is None else low <= value <= high


def _within(value, allowed) -> bool | None:
    return None if value is None else value in allowed


def _seconds(trip: dict) -> float | None:
    pickup, dropoff = trip["lpep_pickup_datetime"], trip["lpep_dropoff_datetime"]
    return (
        None
        if pickup is None or dropoff is None
        else (dropoff - pickup).total_seconds()
    )


def _in_window(moment: datetime | None) -> bool | None:
    today = datetime.now(timezone.utc).date()
    day = 28 if (today.month, today.day) == (2, 29) else today.day
    start = datetime(today.year - 10, today.month, day)
    return _between(
        moment, start, datetime.combine(today, datetime.min.time()) + timedelta(days=1)
    )


def _speed_ok(trip: dict) -> bool | None:
    seconds, distance = _seconds(trip), trip["trip_distance"]
    if seconds is not None and seconds < 0:
        return True
    if seconds is None or distance is None:
        return None
    return distance * 3600 <= 100 * seconds


def _amount(name: str, high: float):
    return {"action": "quarantine", "ok": lambda t, z: _between(t[name], 0, high)}


def _known(name: str):
    return {
        "action": "quarantine",
        "ok": lambda t, z: None if t[name] is None else t[name] in z,
    }


def _required(name: str):
    return {"action": "quarantine", "ok": lambda t, z: _present(t[name])}


# The shipped expectations: a trip breaks one when `ok` is False (None, an
# unknown, breaks none). `t` is the typed trip (with "_payload_bytes"), `z`
# the zone IDs.
RULES = {
    "pickup_time_present": _required("lpep_pickup_datetime"),
    "dropoff_time_present": _required("lpep_dropoff_datetime"),
    "pickup_location_present": _required("PULocationID"),
    "dropoff_location_present": _required("DOLocationID"),
    "fare_amount_present": _required("fare_amount"),
    "total_amount_present": _required("total_amount"),
    "vendor_code": {
        "action": "quarantine",
        "ok": lambda t, z: _within(t["VendorID"], {1, 2, 6, 7}),
    },
    "ratecode": {
        "action": "quarantine",
        "ok": lambda t, z: _within(t["RatecodeID"], {1, 2, 3, 4, 5, 6, 99}),
    },
    "payment_type_code": {
        "action": "quarantine",
        "ok": lambda t, z: _within(t["payment_type"], set(range(7))),
    },
    "trip_type_code": {
        "action": "quarantine",
        "ok": lambda t, z: _within(t["trip_type"], {1, 2}),
    },
    "store_and_fwd_flag_code": {
        "action": "quarantine",
        "ok": lambda t, z: _within(t["store_and_fwd_flag"], {"Y", "N"}),
    },
    "pickup_location_known": _known("PULocationID"),
    "dropoff_location_known": _known("DOLocationID"),
    "pickup_time_in_window": {
        "action": "quarantine",
        "ok": lambda t, z: _in_window(t["lpep_pickup_datetime"]),
    },
    "dropoff_time_in_window": {
        "action": "quarantine",
        "ok": lambda t, z: _in_window(t["lpep_dropoff_datetime"]),
    },
    "dropoff_after_pickup": {
        "action": "quarantine",
        "ok": lambda t, z: None if _seconds(t) is None else _seconds(t) >= 0,
    },
    "trip_duration": {
        "action": "quarantine",
        "ok": lambda t, z: None if _seconds(t) is None else _seconds(t) <= 86400,
    },
    "passenger_count_range": {
        "action": "quarantine",
        "ok": lambda t, z: _between(t["passenger_count"], 0, 9),
    },
    "passengers_recorded": {
        "action": "warn",
        "ok": lambda t, z: (
            None if t["passenger_count"] is None else t["passenger_count"] > 0
        ),
    },
    "trip_distance_range": _amount("trip_distance", 300),
    "trip_speed": {"action": "quarantine", "ok": lambda t, z: _speed_ok(t)},
    "fare_amount_range": _amount("fare_amount", 10000),
    "extra_range": _amount("extra", 100),
    "mta_tax_range": _amount("mta_tax", 10),
    "tip_amount_range": _amount("tip_amount", 1000),
    "tolls_amount_range": _amount("tolls_amount", 1000),
    "ehail_fee_range": _amount("ehail_fee", 100),
    "improvement_surcharge_range": _amount("improvement_surcharge", 10),
    "congestion_surcharge_range": _amount("congestion_surcharge", 10),
    "total_amount_range": _amount("total_amount", 10000),
    "total_covers_fare": {
        "action": "quarantine",
        "ok": lambda t, z: (
            None
            if t["total_amount"] is None or t["fare_amount"] is None
            else t["total_amount"] >= t["fare_amount"]
        ),
    },
    "record_size": {
        "action": "quarantine",
        "ok": lambda t, z: t["_payload_bytes"] <= 4096,
    },
}
UNPARSED = "unparsed"
PAYLOAD_BYTES = "_payload_bytes"


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
    if not isinstance(record, dict):
        return "not a valid record"
    return {**_as_text(record), PAYLOAD_BYTES: len(value)}


def csv_batch(path: Path) -> list[dict]:
    """A CSV file's rows; the payload is its fields as JSON, nulls left out."""
    with path.open(newline="") as handle:
        rows = [
            {k: (v if v != "" else None) for k, v in row.items()}
            for row in csv.DictReader(handle)
        ]
    for row in rows:
        fields = {k: v for k, v in row.items() if v is not None}
        row[PAYLOAD_BYTES] = len(json.dumps(fields, separators=(",", ":")).encode())
    return rows


def zone_boroughs(path: Path) -> dict[int, str]:
    with path.open(newline="") as handle:
        return {
            int(row["LocationID"]): row["Borough"] for row in csv.DictReader(handle)
        }


def zone_events(folder: Path) -> list[dict]:
    """The zone table's change events (Debezium JSON lines), each once (a
    feed delivers some twice), in the database's order (``source.lsn``)."""
    events = {}
    for path in sorted(folder.glob("*.json")):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            events[event["source"]["lsn"]] = event
    return [events[lsn] for lsn in sorted(events)]


def _image(event: dict) -> dict:
    return event["before"] if event["op"] == "d" else event["after"]


def current_zones(events: list[dict]) -> dict[int, dict]:
    """Type 1: each zone as its newest change left it; a deleted one gone."""
    newest = {_image(e)["LocationID"]: e for e in events}  # in lsn order
    return {
        key: {**event["after"], "_lsn": event["source"]["lsn"]}
        for key, event in newest.items()
        if event["op"] != "d"
    }


def zone_versions(events: list[dict]) -> list[dict]:
    """Type 2 (every column tracked): per zone, a version per change that is
    not a delete, from its sequence to the next change's (None: current)."""
    by_key = defaultdict(list)
    for event in events:
        by_key[_image(event)["LocationID"]].append(event)
    versions = []
    for key in sorted(by_key):
        changes = by_key[key]
        for event, after in zip(changes, [*changes[1:], None], strict=True):
            if event["op"] != "d":
                lsn = event["source"]["lsn"]
                end = after and after["source"]["lsn"]
                versions.append(
                    {**event["after"], "_lsn": lsn, "__start_at": lsn, "__end_at": end}
                )
    return versions


def current_boroughs(input_root: Path) -> dict[int, str]:
    """Each zone's borough in the zone table kept from its changes, once
    every change is applied: what the live summary joins with (its query
    waits for the zones' to finish)."""
    zones = current_zones(zone_events(input_root / "zone_changes"))
    return {key: row["Borough"] for key, row in zones.items()}


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


@dataclass
class Verdict:
    """What the checks make of one record."""

    trip: dict | None  # the typed trip, with its "warnings", when it is valid
    reason: str | None  # its rejection reason, when it is not
    caught: list[str]  # the rules it broke, or ["unparsed"]


def evaluate(record: dict | str, zone_ids: set[int]) -> Verdict:
    if isinstance(record, str):
        return Verdict(None, record, [UNPARSED])
    trip = {name: _typed(record.get(name), kind) for name, kind in KINDS.items()}
    # Blank text in a text field is no value, not an invalid one.
    given = {
        n: record.get(n) is not None
        and not (kind == "string" and not record[n].strip(" "))
        for n, kind in KINDS.items()
    }
    problems = [f"invalid {n}" for n in KINDS if given[n] and trip[n] is None]
    if problems:
        return Verdict(None, "; ".join(problems), [UNPARSED])
    trip[PAYLOAD_BYTES] = record[PAYLOAD_BYTES]
    caught = [
        name for name, rule in RULES.items() if rule["ok"](trip, zone_ids) is False
    ]
    del trip[PAYLOAD_BYTES]
    reasons = [n for n in caught if RULES[n]["action"] == "quarantine"]
    if reasons:
        return Verdict(None, "; ".join(reasons), caught)
    warnings = [n for n in caught if RULES[n]["action"] == "warn"]
    return Verdict({**trip, "warnings": "; ".join(warnings) or None}, None, caught)


def check(record: dict | str, zone_ids: set[int]) -> tuple[dict | None, str | None]:
    """The typed trip and ``None``, or ``None`` and the rejection reason."""
    verdict = evaluate(record, zone_ids)
    return verdict.trip, verdict.reason


@dataclass
class Expected:
    bronze: list[dict] = field(default_factory=list)
    rejections: Counter = field(default_factory=Counter)
    # Per micro-batch: the records each expectation caught, and "unparsed".
    batch_counts: list[Counter] = field(default_factory=list)
    late_trips: int = 0
    # Per micro-batch: the late (window, borough) groups, which Spark counts
    # as its numRowsDroppedByWatermark (it aggregates a batch before its state).
    late_groups_by_batch: list[int] = field(default_factory=list)
    # Per micro-batch: its records, the ones rejected, the (window, borough)
    # rows an update-mode summary writes (those its trips changed), and the
    # windows an append-mode summary writes (those the watermark closed).
    batch_rows: list[int] = field(default_factory=list)
    batch_rejected: list[int] = field(default_factory=list)
    batch_updated: list[int] = field(default_factory=list)
    batch_closed: list[int] = field(default_factory=list)
    tombstones: int = 0
    # Closed windows (the append-mode summary), and every window (the live one).
    summary: pd.DataFrame | None = None
    live: pd.DataFrame | None = None
    # The windows the append-mode summary wrote in these batches: `summary`
    # but for those only a further batch (moving the watermark) would write.
    written: pd.DataFrame | None = None


def expected_outputs(
    batches: list[list[dict | str]],
    boroughs: dict[int, str],
    settings: ExampleSettings,
    watermarks: list[datetime] | None = None,
    live_boroughs: dict[int, str] | None = None,
) -> Expected:
    """Replays the two pipelines over micro-batches, one batch per landing file.

    Spark's append-mode window aggregation: a window is emitted once the
    watermark (max event time so far minus the delay, advanced after each
    batch) reaches its end; a row is dropped as late when its window ended at
    or before the watermark of the batch before (the late-event watermark
    trails the eviction watermark by one batch since Spark 3.5). Windows are
    tumbling, ``settings.window`` long and aligned on the epoch, as Spark's.

    ``watermarks``, when given, are the watermarks the batches ran with, as a
    query's offset log records them; Spark derives each from the event times
    the batch before reported, which it may not have after a crash.

    ``live_boroughs``: the zones' boroughs the live summary joins with (the
    zone table kept from its changes), when not ``boroughs``: its rows and
    each batch's groups (updated, late) follow them. The trips are checked
    against ``boroughs`` (the static lookup) either way.
    """
    window, delay = settings.window, settings.watermark_delay
    live_boroughs = boroughs if live_boroughs is None else live_boroughs
    out = Expected()
    state: dict[tuple, list[dict]] = defaultdict(list)
    live_state: dict[tuple, list[dict]] = defaultdict(list)
    emitted: set[tuple] = set()
    eviction_wm = late_wm = None
    for number, batch in enumerate(batches):
        if watermarks is not None:
            eviction_wm = watermarks[number]
            late_wm = watermarks[number - 1] if number else None
        valid, counts = [], Counter()
        out.tombstones += sum(1 for record in batch if record is TOMBSTONE)
        for record in batch:
            verdict = evaluate(record, set(boroughs))
            counts.update(verdict.caught)
            if verdict.reason:
                out.rejections[verdict.reason] += 1
            else:
                valid.append(verdict.trip)
        out.batch_counts.append(counts)
        out.batch_rows.append(len(batch))
        out.batch_rejected.append(len(batch) - len(valid))
        out.bronze += valid
        late_groups, updated = set(), set()
        for trip in valid:
            start = _window_start(trip["lpep_dropoff_datetime"], window)
            key = (start, boroughs.get(trip["PULocationID"], "Unknown"))
            # The groups a batch touched, as the live summary groups them.
            live_key = (start, live_boroughs.get(trip["PULocationID"], "Unknown"))
            if late_wm is not None and start + window <= late_wm:
                out.late_trips += 1
                late_groups.add(live_key)
                continue
            state[key].append(trip)
            live_state[live_key].append(trip)
            updated.add(live_key)
        out.late_groups_by_batch.append(len(late_groups))
        out.batch_updated.append(len(updated))
        # Append mode writes a window once, in the first batch that runs with
        # a watermark at or past its end.
        newly_closed = {
            key
            for key in state
            if eviction_wm is not None and key[0] + window <= eviction_wm
        } - emitted
        out.batch_closed.append(len(newly_closed))
        emitted |= newly_closed
        # The next batch checks late trips against the watermark this one ran
        # with, whether or not this one had trips (a batch that only moves
        # the watermark is still a batch).
        late_wm = eviction_wm
        if valid:
            batch_wm = max(t["lpep_dropoff_datetime"] for t in valid) - delay
            eviction_wm = (
                batch_wm if eviction_wm is None else max(eviction_wm, batch_wm)
            )

    out.live = _summary_rows(live_state, window)
    every = _summary_rows(state, window)
    closed = (
        every.window_end <= eviction_wm
        if eviction_wm is not None
        else [False] * len(every)
    )
    out.summary = every[closed].reset_index(drop=True)
    keys = zip(every.window_start, every.pickup_borough, strict=True)
    out.written = every[[key in emitted for key in keys]].reset_index(drop=True)
    return out


def _summary_rows(state: dict[tuple, list[dict]], window: timedelta) -> pd.DataFrame:
    """One row per (window start, borough) of ``state``, every figure."""
    rows = []
    for (start, borough), trips in state.items():
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
    return (
        pd.DataFrame(rows)
        .sort_values(["window_start", "pickup_borough"])
        .reset_index(drop=True)
    )


def _window_start(moment: datetime, window: timedelta) -> datetime:
    return EPOCH + (moment - EPOCH) // window * window


def _mean(values) -> float:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else float("nan")


def _sum(values) -> float:
    present = [v for v in values if v is not None]
    return sum(present) if present else float("nan")
