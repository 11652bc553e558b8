"""`kedro streams status | validate | reset` on a generated project, with real
Spark: before any run, after bounded runs, after a reset and a rerun (compared
with the independent reference), and on broken queries.

The commands during a continuous run are in `test_starter.py` (SIGTERM test),
after a kill -9 mid-batch, Kafka lag and a Kafka sink's reset in
`test_guarantees.py`.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

from support.checkpoints import batch_ids, committed_files, read_table
from support.common import BOUNDED, kedro_run, run, streams
from support.compare import (
    assert_expectation_counts,
    assert_matches_reference,
    assert_progress_log,
    example_reference,
    split_bronze,
)
from support.metrics import progress_records

# What follows Spark's words on an aggregation without a watermark in append mode.
WATERMARK_FIX = (
    "Fix: in the node, `.withWatermark(<event-time column>, <delay>)` before the "
    "aggregation (append writes a window once the watermark passes it), or give "
    "the sink `output_mode: update` or `complete`"
)


def status_lines(project_bin: Path, project: Path, *args: str) -> dict[str, str]:
    """`kedro streams status`: each sink's line, by sink."""
    result = streams(project_bin, project, "status", *args)
    return dict(re.findall(r"^(\w+): (.*)$", result.stdout, re.MULTILINE))


def checkpoints(project: Path) -> list[str]:
    return [
        p.name for p in (project / "data/checkpoints").iterdir() if p.name[0] != "."
    ]


def land_last(project: Path, trips: list[dict], name: str = "trips-0100.json") -> None:
    """Lands ``trips`` as a file read after the example's files."""
    path = project / "data/01_raw/trips_landing" / name
    path.write_text("".join(json.dumps(trip) + "\n" for trip in trips))
    os.utime(path, (time.time() + 5, time.time() + 5))


def assert_status_counts(line: str, batches: int, lines: int, expected) -> None:
    """bronze_trips' status line: batches, rows, and each rule's count."""
    found = re.search(
        rf"batch {batches - 1} committed \S+ \S+ UTC · {lines} rows written in "
        rf"{batches} batches, (\d+) quarantined, expectations: ([\w ,]+) · "
        "not running$",
        line,
    )
    assert found, line
    assert int(found[1]) == sum(expected.rejections.values())
    caught = dict(re.findall(r"(\w+) (\d+)", found[2]))
    assert caught == {
        rule: str(count)
        for rule, count in sum(expected.batch_counts, Counter()).items()
    }


def assert_refused_from_src(project_bin: Path, project: Path) -> None:
    """From a folder inside the project, which Kedro allows, the checkpoints'
    relative paths would be that folder's: refused before Spark starts."""
    inside = kedro_run(
        project_bin, project / "src", "--pipelines", "aggregate", check=False
    )
    assert inside.returncode == 1, inside.output[-3000:]
    assert inside.stderr[inside.stderr.find("StreamingConfigError:") :].strip() == (
        f"StreamingConfigError: This command runs in {project / 'src'}, not "
        f"in the project's folder {project}, so these relative paths would "
        "be resolved here: new checkpoints, every source read again from the "
        "start:\n"
        "  - 'hourly_borough_summary': 'data/checkpoints/hourly_borough_summary'\n"
        "  - 'quarantined_trips': 'data/checkpoints/quarantined_trips'\n"
        "  - 'state_dir (streaming.yml)': 'data/streams'\n"
        f"Run it from {project}, or make the paths absolute (input_root "
        "and output_root in conf/<env>/globals.yml)."
    )
    assert not (project / "src/data").exists()


def test_status_validate_and_reset_around_bounded_runs(fresh_project, project_bin):
    data = fresh_project / "data"
    expected = example_reference(fresh_project)
    lines = len(expected.bronze) + sum(expected.rejections.values())

    # Nothing has run: nothing committed, nothing running.
    status = status_lines(project_bin, fresh_project)
    assert set(status) == {
        "bronze_trips",
        "hourly_borough_summary",
        "quarantined_trips",
    }
    for line in status.values():
        assert "no batch committed yet" in line and "not running" in line
    assert checkpoints(fresh_project) == []
    assert not (data / "02_intermediate/bronze_trips").exists()

    assert_refused_from_src(project_bin, fresh_project)

    # One pipeline at a time, as a scheduler would run them.
    ingest = kedro_run(project_bin, fresh_project, "--pipelines", "ingest")
    assert_expectation_counts(ingest.stdout + ingest.stderr, fresh_project, expected)
    assert not (data / "08_reporting/hourly_borough_summary/_spark_metadata").exists()
    kedro_run(project_bin, fresh_project, "--pipelines", "aggregate")
    assert_matches_reference(fresh_project, expected)

    batches = len(list((data / "01_raw/trips_landing").glob("*.json")))
    status = status_lines(project_bin, fresh_project)
    assert_status_counts(status["bronze_trips"], batches, lines, expected)
    # The same from a folder inside the project: the project's state.
    assert status_lines(project_bin, fresh_project / "src") == status
    assert f"{len(expected.summary)} rows written" in status["hourly_borough_summary"]
    late_groups = sum(expected.late_groups_by_batch)
    assert f"{late_groups} late state rows dropped" in status["hourly_borough_summary"]
    assert (
        f"{sum(expected.rejections.values())} rows written"
        in (status["quarantined_trips"])
    )
    assert "uncommitted" not in " ".join(status.values())
    # The summary's state after its last batch, as that batch's record has it.
    (last_state,) = [
        r
        for r in progress_records(fresh_project)
        if r["query"] == "hourly_borough_summary"
    ][-1]["state_operators"]
    assert last_state["name"] == "stateStoreSave"
    assert (
        f"state after its last batch: stateStoreSave {last_state['rows']} rows "
        in status["hourly_borough_summary"]
    )

    # The persisted progress log: one record per micro-batch of each query,
    # every figure the reference's for that batch. Spark's late figure counts
    # late (window, borough) groups, not trips: the aggregation sums each
    # batch's trips per group before its state (the example data has a batch
    # with two late trips in one group).
    records = progress_records(fresh_project)
    assert [r["batch"] for r in records if r["query"] == "bronze_trips"] == list(
        range(batches)
    )
    assert_progress_log(fresh_project)
    late = [
        r["late_state_rows_dropped"]
        for r in records
        if r["query"] == "hourly_borough_summary"
    ]
    assert sum(late) == sum(expected.late_groups_by_batch) < expected.late_trips

    assert_resumes_as_it_is(project_bin, fresh_project, list(status), records)

    # Reset the summary, from a folder inside the project: bronze is
    # untouched, the summary is rebuilt from it.
    bronze_files = committed_files(data / "02_intermediate/bronze_trips")
    result = streams(
        project_bin, fresh_project / "src", "reset", "hourly_borough_summary", "--yes"
    )
    assert "bronze_trips" not in result.stdout
    # Both paths as the catalog has them: in the project's folder.
    assert (
        "hourly_borough_summary: table data/08_reporting/hourly_borough_summary "
        "and checkpoint data/checkpoints/hourly_borough_summary\n" in result.stdout
    )
    assert not (data / "08_reporting/hourly_borough_summary").exists()
    assert not (data / "checkpoints/hourly_borough_summary").exists()
    status = status_lines(project_bin, fresh_project)
    assert "no batch committed yet" in status["hourly_borough_summary"]
    assert "rows written" not in status["hourly_borough_summary"]
    kedro_run(project_bin, fresh_project, "--pipelines", "aggregate")
    assert committed_files(data / "02_intermediate/bronze_trips") == bronze_files
    assert_matches_reference(fresh_project, expected)

    # Reset bronze: every stream that reads it goes too.
    result = streams(project_bin, fresh_project, "reset", "bronze_trips", "--yes")
    assert (
        "Reset bronze_trips, hourly_borough_summary, quarantined_trips."
        in result.stdout
    )
    for sink in ("bronze_trips", "hourly_borough_summary", "quarantined_trips"):
        assert not (data / "checkpoints" / sink).exists()

    # Only streaming sinks can be reset.
    refused = streams(
        project_bin, fresh_project, "reset", "taxi_zones", "--yes", check=False
    )
    assert refused.returncode != 0 and "is not a streaming sink" in refused.output
    assert (data / "01_raw/taxi_zone_lookup.csv").exists()


def assert_state_as_logged(project_bin, project, logged: dict) -> None:
    """`kedro streams state` reads the summary's state from its checkpoint:
    as many keys as Spark's progress counted after the last batch, each a
    1-hour window and a borough with its aggregates' buffers."""
    sink = "hourly_borough_summary"
    listed = streams(project_bin, project, "state", sink).stdout
    assert re.search(
        r"^operator 0: stateStoreSave, 2 partitions, batches 0 to \d+$", listed, re.M
    )
    lines = streams(project_bin, project, "state", sink, "--operator", "0", "--json")
    state = [json.loads(line) for line in lines.stdout.splitlines()]
    assert len(state) == logged["rows"]
    for row in state:
        start, end = (
            datetime.fromisoformat(row[f"key.window.{edge}"])
            for edge in ("start", "end")
        )
        assert end - start == timedelta(hours=1) and row["value.count"] > 0


def assert_resumes_as_it_is(project_bin, project, queries, records) -> None:
    """Nothing changed since the runs: `validate` says each query resumes as
    it is, after its last batch."""
    validated = streams(project_bin, project, "validate").stdout
    for query in queries:
        last = max(r["batch"] for r in records if r["query"] == query)
        assert f"query {query}: ok, resumes as it is after batch {last}\n" in validated
    summary = [r for r in records if r["query"] == "hourly_borough_summary"]
    assert_state_as_logged(project_bin, project, summary[-1]["state_operators"][0])


def test_validate_names_each_broken_query_and_writes_nothing(
    fresh_project, project_bin
):
    nodes = fresh_project / "src/taxi_rides/pipelines/aggregate/nodes.py"
    code = nodes.read_text()
    # A column that does not exist, and a sink that cannot take the output mode.
    nodes.write_text(code.replace('F.col("rejection_reason")', 'F.col("rejection")'))
    broken = fresh_project / "conf/broken"
    broken.mkdir()
    (broken / "catalog.yml").write_text(
        "hourly_borough_summary:\n"
        "  type: kedro_streaming.SparkStreamingDataset\n"
        "  filepath: data/08_reporting/hourly_borough_summary\n"
        "  file_format: parquet\n"
        "  save_args:\n"
        "    output_mode: complete\n"
        "    checkpoint: data/checkpoints/hourly_borough_summary\n"
    )
    result = streams(
        project_bin, fresh_project, "validate", "--env", "broken", check=False
    )
    output = " ".join(result.output.split())
    assert result.returncode != 0
    assert "query bronze_trips: ok" in output
    assert (
        "query hourly_borough_summary: node select_valid_trips fails: "
        "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function "
        "parameter with name `rejection` cannot be resolved" in output
    )
    assert (
        "query quarantined_trips: node select_rejected_trips fails: "
        "[UNRESOLVED_COLUMN.WITH_SUGGESTION]" in output
    )
    assert (
        "'hourly_borough_summary' has output_mode 'complete', which a parquet "
        "sink does not support" in output
    )
    assert "3 problem(s)" in output

    # A stateful aggregation without a watermark, in append mode.
    unwatermarked = code.replace(
        'trips.withWatermark("lpep_dropoff_datetime", summary["watermark_delay"])',
        "trips",
    )
    assert unwatermarked != code  # the node as shipped has that watermark
    nodes.write_text(unwatermarked)
    result = streams(project_bin, fresh_project, "validate", check=False)
    output = " ".join(result.output.split())
    assert result.returncode != 0
    refused = (
        "query hourly_borough_summary (node summarise_hourly_by_borough): "
        "[STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION] Invalid streaming output "
        "mode: append. This output mode is not supported for streaming "
        "aggregations without watermark on streaming DataFrames/DataSets."
    )
    assert f"{refused} SQLSTATE: 42KDE {WATERMARK_FIX}" in output
    # `kedro run` makes the same dry run first: that line, and nothing starts.
    ran = kedro_run(project_bin, fresh_project, check=False)
    assert ran.returncode == 1
    # What the terminal shows after Spark's own start lines: this, and no trace.
    got = ran.stderr[ran.stderr.find("StreamingConfigError:") :].strip()
    assert got == (
        "StreamingConfigError: Streaming queries cannot start as the pipeline's "
        "nodes build them (`kedro streams validate` lists the same):\n"
        f"  - {refused} SQLSTATE: 42KDE {WATERMARK_FIX}"
    ), ran.output[-3000:]
    assert "Traceback" not in ran.output
    assert "Started streaming query" not in ran.output
    assert checkpoints(fresh_project) == []
    assert not (fresh_project / "data/02_intermediate/bronze_trips").exists()

    # Plans that build, but a sink's configuration is wrong, and an option of
    # a source two nodes before bronze_trips' sink: neither query called ok.
    nodes.write_text(code)
    (broken / "catalog.yml").write_text(
        (broken / "catalog.yml").read_text() + "raw_trips:\n"
        "  type: kedro_streaming.SparkStreamingDataset\n"
        "  filepath: data/01_raw/trips_landing\n"
        "  file_format: text\n"
        "  load_args:\n"
        "    maxBytesPerTriger: 1\n"
    )
    result = streams(
        project_bin, fresh_project, "validate", "--env", "broken", check=False
    )
    assert result.returncode != 0
    assert "query bronze_trips: ok" not in result.stdout
    assert "query quarantined_trips: ok" in result.stdout  # its sources are right
    assert (
        "query bronze_trips: its plan builds, but see the problem with "
        "'raw_trips' below"
    ) in result.stdout
    assert (
        "query hourly_borough_summary: its plan builds, but see the problem with "
        "'hourly_borough_summary' below"
    ) in result.stdout
    assert "'raw_trips' `maxBytesPerTriger` in its load_args" in result.stderr
    assert "2 problem(s)" in result.output
    assert checkpoints(fresh_project) == []
    assert not (fresh_project / "data/streams").exists()


def test_fail_expectation_stops_at_its_batch_and_the_fixed_rerun_resumes(
    fresh_project, project_bin
):
    """A `fail` rule stops the query at the micro-batch with the record that
    breaks it, naming the rule, the record's origin and the fix; nothing of
    that batch is committed, and a rerun with the rule fixed resumes there."""
    data = fresh_project / "data"
    checkpoint = data / "checkpoints/bronze_trips"
    example_line = (data / "01_raw/trips_landing/trips-0000.json").read_text()
    land_last(
        fresh_project, [{**json.loads(example_line.splitlines()[0]), "VendorID": 3}]
    )

    def failing_ingest(params: str) -> str:
        """`kedro run --pipelines ingest`, which must fail: its output, unwrapped."""
        result = run(
            [project_bin / "kedro", "run", "--pipelines", "ingest", "--params", params],
            cwd=fresh_project,
            check=False,
        )
        assert result.returncode != 0
        return " ".join(result.output.split())

    # A rule that cannot be checked stops the run before any query starts.
    output = failing_ingest(
        "trigger=available_now,trip_expectations.vendor_code.expect=VendorId_ > 0"
    )
    assert (
        "expectation 'vendor_code' (trip_expectations, "
        "conf/base/parameters_expectations.yml): `VendorId_ > 0` cannot be checked: "
        "[UNRESOLVED_COLUMN.WITH_SUGGESTION]" in output
    ), output[-3000:]
    assert "Started streaming query" not in output
    assert not checkpoint.exists()

    # The same rule with action `fail`: the example's 8 files commit, the 9th fails.
    output = failing_ingest(f"{BOUNDED[1]},trip_expectations.vendor_code.action=fail")
    assert (
        "Streaming query 'bronze_trips' failed: [USER_RAISED_EXCEPTION] Expectation "
        "'vendor_code' failed (action: fail) on file file://" in output
    ), output[-3000:]
    assert '/trips_landing/trips-0100.json, record {"VendorID": 3, ' in output
    assert (
        "Correct the record at its source, or change the rule or its action in "
        "trip_expectations, conf/base/parameters_expectations.yml; then run again: "
        "the query resumes at this micro-batch, which was not committed." in output
    )
    assert batch_ids(checkpoint / "commits") == set(range(8))
    assert batch_ids(checkpoint / "offsets") == set(range(9))

    # Fixed (the rule as shipped quarantines): the rerun resumes at batch 8.
    resumed = kedro_run(project_bin, fresh_project, "--pipelines", "ingest")
    assert "Query bronze_trips batch 8: 1 rows in" in " ".join(resumed.output.split())
    assert batch_ids(checkpoint / "commits") == set(range(9))
    expected = example_reference(fresh_project)
    valid, quarantined = split_bronze(read_table(data, "02_intermediate/bronze_trips"))
    assert len(valid) == len(expected.bronze)
    assert quarantined.rejection_reason.value_counts().to_dict() == dict(
        expected.rejections
    )
    assert expected.rejections["vendor_code"] == 1
