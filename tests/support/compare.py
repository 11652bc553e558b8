"""Comparing a run's outputs and progress log with the independent
computation in `reference.py`.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from datetime import datetime
from pathlib import Path

import pandas as pd
from reference import (
    SUMMARY_COLUMNS,
    current_boroughs,
    current_zones,
    example_settings,
    expected_outputs,
    json_landing_batches,
    zone_boroughs,
    zone_versions,
)

from support.checkpoints import (
    file_source_batches,
    local_path,
    read_table,
    replay,
    table_batches,
)
from support.metrics import progress_records

# The `zones` pipeline's queries (`live` includes it): change events in.
ZONE_QUERIES = ("current_zones@changes", "zone_history", "refused_zone_changes")


def example_reference(
    project: Path,
    one_batch: bool = False,
    input_root: Path | None = None,
    live: bool = False,
):
    """The example's expected outputs, from the files of ``input_root``.

    Args:
        project: The project, whose parameters the computation follows.
        one_batch: All landed files in one micro-batch (as shipped), else one
            micro-batch per file.
        input_root: Where the run reads its input; the project's data/01_raw
            by default.
        live: The `live` pipeline ran: its summary joins the zone table as
            its changes left it (`current_boroughs`).
    """
    root = input_root or project / "data/01_raw"
    batches = json_landing_batches(root / "trips_landing")
    return expected_outputs(
        [[record for batch in batches for record in batch]] if one_batch else batches,
        zone_boroughs(root / "taxi_zone_lookup.csv"),
        example_settings(project),
        live_boroughs=current_boroughs(root) if live else None,
    )


def expected_progress(query: str, expected, batch: int) -> dict:
    """The figures the progress log must hold for one micro-batch of a query
    of the example, from the reference's replay of that query's batches."""
    figures = {
        "input_rows": expected.batch_rows[batch],
        "rows_written": 0,
        "quarantined": 0,
        "late_state_rows_dropped": 0,
        "expectations": {},
    }
    if query == "bronze_trips":  # every record: the trips and the rejected
        figures["rows_written"] = expected.batch_rows[batch]
        figures["quarantined"] = expected.batch_rejected[batch]
        figures["expectations"] = {
            rule: count for rule, count in expected.batch_counts[batch].items() if count
        }
    elif query == "quarantined_trips":
        figures["rows_written"] = expected.batch_rejected[batch]
    else:  # the summaries: windows, by the sink's output mode
        figures["late_state_rows_dropped"] = expected.late_groups_by_batch[batch]
        figures["rows_written"] = (
            expected.batch_updated[batch]
            if query == "live_borough_summary"
            else expected.batch_closed[batch]
        )
    return figures


def assert_progress_log(
    project: Path, output_root: str = "data", messages: dict | None = None
) -> None:
    """Every record of the progress log, figure by figure (rows in, rows
    written, quarantined, each rule's count, late state rows dropped), equals
    the reference replaying that query's own micro-batches, read from its
    checkpoint; each batch is logged once at most (a batch that committed
    just before a SIGKILL may be missing: it ran, its report was not read).

    Args:
        messages: The trips topic's messages by (topic, partition, offset),
            for a run that reads Kafka.
    """
    logged: dict[str, list[dict]] = {}
    for record in progress_records(project, output_root):
        logged.setdefault(record["query"], []).append(record)
    assert logged, "the progress log is empty"
    for query, records in logged.items():
        batches = [r["batch"] for r in records]
        assert len(set(batches)) == len(batches), (query, batches)
        if query in ZONE_QUERIES:
            assert_zone_progress(project / output_root, query, records)
            continue
        if query == "hourly_borough_summary_messages":
            # Publishes the summary's rows as they are: one message per row.
            read = [len(rows) for rows in table_batches(project / output_root, query)]
            want = [
                {"input_rows": read[n], "rows_written": read[n], "quarantined": 0}
                for n in batches
            ]
        else:
            live = query == "live_borough_summary"
            expected = replay(project, output_root, query, messages, live=live)
            want = [expected_progress(query, expected, n) for n in batches]
        offsets = project / output_root / "checkpoints" / query / "offsets"
        for record, figures in zip(records, want, strict=True):
            started = datetime.fromisoformat(record["time"]).timestamp()
            if (offsets / str(record["batch"])).stat().st_mtime < started:
                # Planned before a crash, run after it: Spark may report this
                # batch's figures as 0 (seen with a Delta source), so unknown.
                continue
            assert {key: record[key] for key in figures} == figures, (query, record)


def assert_zone_progress(tables: Path, query: str, records: list[dict]) -> None:
    """A zone query's records: the events each batch read, every one of them
    said to be applied or why not (a table kept from changes), none refused."""
    # The checkpoint of `current_zones@changes` is checkpoints/current_zones.
    files = file_source_batches(
        tables / "checkpoints" / query.split("@", maxsplit=1)[0]
    )
    for record in records:
        read = files[record["batch"]]
        lines = sum(len(local_path(uri).read_text().splitlines()) for uri in read)
        assert record["input_rows"] == lines, (query, record)
        if query == "refused_zone_changes":
            assert record["rows_written"] == 0, record
        else:
            assert sum(record["changes"].values()) == lines, record


def assert_matches_reference(
    project: Path, expected, output_root: str = "data", live: bool = False
) -> None:
    """Compares every output of a run with the independent computation.

    Args:
        live: Also the `live` pipeline's live_borough_summary (conf/delta).
    """
    tables = project / output_root
    bronze, quarantined = split_bronze(
        read_table(tables, "02_intermediate/bronze_trips")
    )
    summary = read_table(tables, "08_reporting/hourly_borough_summary")

    # The quarantine table: exactly bronze's rejected records, every column.
    table = read_table(tables, "02_intermediate/quarantined_trips")
    assert_same_rows(table, quarantined)

    # Bronze: exactly the valid trips, field by field.
    keys = list(expected.bronze[0])
    want = (
        pd.DataFrame(expected.bronze)[keys]
        .astype(object)
        .where(lambda f: f.notna(), None)
    )
    got = bronze[keys].astype(object).where(lambda f: f.notna(), None)
    sort = lambda frame: sorted(tuple(row) for row in frame.itertuples(index=False))  # noqa: E731
    assert sort(got) == sort(want)

    # Quarantine: every other record, with its reason.
    assert quarantined["rejection_reason"].value_counts().to_dict() == dict(
        expected.rejections
    )
    # A Kafka tombstone has no payload; every other record keeps its own.
    assert (
        quarantined.raw_payload.notna().sum() == len(quarantined) - expected.tombstones
    )

    assert_summary(summary, expected.summary)
    if live:
        assert_summary(
            read_table(tables, "08_reporting/live_borough_summary"), expected.live
        )


def assert_same_rows(got: pd.DataFrame, want: pd.DataFrame) -> None:
    """The same rows (in any order) with the same columns."""
    assert sorted(got.columns) == sorted(want.columns)
    columns = sorted(want.columns)
    rows = lambda frame: sorted(  # noqa: E731
        map(
            repr,
            frame[columns]
            .astype(object)
            .where(frame[columns].notna(), None)
            .itertuples(index=False),
        )
    )
    assert rows(got) == rows(want)


def assert_summary(summary: pd.DataFrame, want: pd.DataFrame) -> None:
    """Every window and borough of a summary table, every figure."""
    got = summary.sort_values(["window_start", "pickup_borough"]).reset_index(drop=True)
    assert list(zip(got.window_start, got.pickup_borough)) == list(
        zip(want.window_start, want.pickup_borough)
    )
    assert (got.window_end == want.window_end).all()
    for column in SUMMARY_COLUMNS:
        for got_value, want_value in zip(got[column], want[column]):
            # Averages of doubles: Spark and pandas sum them in other orders,
            # so the last bits differ; everything else is compared exactly.
            assert math.isclose(got_value, want_value, rel_tol=1e-9, abs_tol=1e-9) or (
                math.isnan(got_value) and math.isnan(want_value)
            ), (column, got_value, want_value)


def logged_expectations(log: str, query: str = "bronze_trips") -> dict:
    """The records each expectation caught, as a run's console reports them:
    ``batches`` (one ``{rule: count}`` per progress line) and ``ended`` (the
    end-of-run totals line). Rules that caught nothing are not shown."""

    def counts(text: str | None) -> dict[str, int]:
        pairs = re.findall(r"(\w+) (\d+)", text or "")
        return {rule: int(count) for rule, count in pairs}

    stateful = r"(?:, watermark [^,]*, \d+ state rows, \d+ late state rows dropped)?"
    batches = re.findall(
        rf"Query {query} batch \d+: [^\n]*? ms{stateful}"
        r"(?:, expectations: ([\w ,]+))?",
        log,
    )
    ended = re.search(
        rf"Query {query} ended: [^\n]*? quarantined"
        r"(?:, \d+ late state rows dropped)?(?:, expectations: ([\w ,]+))?\.",
        log,
    )
    return {
        "batches": [counts(text) for text in batches],
        "ended": counts(ended[1]) if ended else None,
    }


def assert_expectation_counts(log: str, project: Path, expected) -> None:
    """Per rule, per micro-batch: the console's progress lines, its end-of-run
    totals and the persisted progress log give the reference's counts.

    ``log`` is the console of one run that read every batch ``expected``
    replays, in a project whose progress log holds that run only.
    """
    want = [
        {rule: count for rule, count in batch.items() if count}
        for batch in expected.batch_counts
    ]
    logged = logged_expectations(log)
    assert logged["batches"] == want
    assert logged["ended"] == dict(sum(expected.batch_counts, Counter()))
    records = [
        json.loads(line)
        for line in (project / "data/streams/progress.jsonl").read_text().splitlines()
    ]
    assert [r["expectations"] for r in records if r["query"] == "bronze_trips"] == want
    totals = json.loads((project / "data/streams/totals.json").read_text())
    assert totals["bronze_trips"]["expectations"] == logged["ended"]


def split_bronze(bronze: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """bronze_trips' valid trips, and its rejected records (the quarantine)."""
    rejected = bronze.rejection_reason.notna()
    return bronze[~rejected], bronze[rejected]


def assert_zone_tables(tables: Path, events: list[dict]) -> pd.DataFrame:
    """The zone table kept from its change ``events`` (each once, in the
    database's order), as current rows (type 1) and as versions (type 2),
    equal to their replay; returns the refused events' table."""
    current = read_table(tables, "03_primary/current_zones")
    assert_same_rows(current, pd.DataFrame(list(current_zones(events).values())))
    history = read_table(tables, "03_primary/zone_history")
    assert_same_rows(history, pd.DataFrame(zone_versions(events)))
    assert len(history) > len(current)  # versions closed by updates and deletes
    return read_table(tables, "02_intermediate/refused_zone_changes")
