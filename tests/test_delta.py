"""The Delta environment (`--env delta`): Delta tables between the pipelines,
the live summary kept up to date with MERGE, and table care while streams run.

Real Spark with the Delta package from Maven Central; the tables are read
back with delta-rs (the `deltalake` package), not Spark, and compared with
the independent computation in `reference.py`.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest
from deltalake import DeltaTable
from reference import zone_events
from support.checkpoints import DELTA_TABLES, assert_one_commit_per_batch, read_table
from support.common import (
    AS_SHIPPED,
    FILE_BY_FILE,
    SPARK_VERSION,
    kedro_run,
    run,
    streams,
)
from support.compare import (
    assert_matches_reference,
    assert_progress_log,
    assert_zone_tables,
    example_reference,
    split_bronze,
)
from support.metrics import progress_records
from support.processes import start_kedro, wait_for

DELTA = ["--env", "delta"]
WITH_LIVE = [*DELTA, "--pipelines", "ingest,aggregate,live"]
TABLES = DELTA_TABLES


def test_delta_tables_match_the_reference_one_commit_per_batch(
    fresh_project, project_bin
):
    """Files in, Delta tables out (the live summary included), read back
    without Spark; a Delta package that does not fit the Spark that runs
    stops the run before any stream."""
    wrong = fresh_project / "conf/wrong_delta"
    wrong.mkdir()
    (wrong / "spark.yml").write_text(
        "spark.jars.packages: io.delta:delta-spark_2.13:3.2.0\n"
    )
    refused = run(
        [project_bin / "kedro", "run", "--env", "wrong_delta"],
        cwd=fresh_project,
        check=False,
    )
    assert refused.returncode != 0
    message = " ".join(refused.output.split())
    assert "io.delta:delta-spark_2.13:3.2.0, built for Spark 3.5" in message
    assert "Fix: set spark.jars.packages" in message
    line = SPARK_VERSION.rsplit(".", 1)[0]
    assert f"io.delta:delta-spark_{line}_2.13:4.4.0 (https://docs.delta.io" in message
    assert "Started streaming query" not in refused.output
    assert not list((fresh_project / "data").glob("*/*/offsets"))

    # As shipped, every landed file in one micro-batch (Delta over several
    # batches, MERGE and crashes included: test_guarantees). The live summary
    # joins the zone table kept from its changes, as they leave it.
    kedro_run(project_bin, fresh_project, *WITH_LIVE, params=AS_SHIPPED)
    expected = example_reference(fresh_project, one_batch=True, live=True)
    assert_matches_reference(fresh_project, expected, "data/delta", live=True)
    changes = fresh_project / "data/01_raw/zone_changes"
    events = zone_events(changes)
    delivered = sum(len(f.read_text().splitlines()) for f in changes.glob("*.json"))
    assert len(events) < delivered  # some delivered twice, some late
    refused = assert_zone_tables(fresh_project / "data/delta", events)
    assert refused.empty
    assert_progress_log(fresh_project, "data/delta")
    assert_one_commit_per_batch(fresh_project)
    # Parquet and Delta runs share nothing.
    assert not (fresh_project / "data/02_intermediate/bronze_trips").exists()
    assert not [p for p in (fresh_project / "data/checkpoints").iterdir() if p.is_dir()]

    # The zones' changes moved trips: the live summary's boroughs are not
    # the static lookup's.
    static = example_reference(fresh_project, one_batch=True)
    assert not static.live.equals(expected.live)
    tables = fresh_project / "data/delta"

    status = streams(project_bin, fresh_project, "status", *WITH_LIVE).stdout
    for query, table in TABLES.items():
        version = DeltaTable(str(tables / table)).version()
        assert re.search(rf"^{query}: .* · Delta version {version} · ", status, re.M)

    # The record schema changes without a reset: a field added, another
    # retyped. Before any query starts, the committed Delta table's schema
    # is compared with what bronze's query would write: the new column is
    # noted, the retyped one refused with its types and the fix; nothing is
    # written.
    nodes = next(fresh_project.glob("src/*/pipelines/ingest/nodes.py"))
    nodes.write_text(
        nodes.read_text().replace(
            '"trip_type": "int",', '"trip_type": "string",\n    "tip_pct": "double",'
        )
    )
    bronze = DeltaTable(str(tables / TABLES["bronze_trips"])).version()
    for command in (
        ["streams", "validate", *DELTA, "--pipelines", "ingest"],
        ["run", *DELTA, "--pipelines", "ingest", "--params", FILE_BY_FILE],
    ):
        refused = run([project_bin / "kedro", *command], cwd=fresh_project, check=False)
        assert refused.returncode == 1, refused.output
        output = " ".join(refused.output.split())
        assert (
            "'bronze_trips' gains column tip_pct (double): accepted (rows written "
            "before read it as null)." in output
        )
        assert (
            "query bronze_trips (node check_trips): 'bronze_trips' would no longer "
            "match its committed files: column trip_type was int, is now string. "
            "Fix: keep the committed columns and types in the node that writes it "
            "(or in the schema it parses by, e.g. a parameter), or `kedro streams "
            "reset bronze_trips`" in output
        )
        assert "Started streaming query" not in refused.output
        assert "Traceback" not in refused.output
    assert DeltaTable(str(tables / TABLES["bronze_trips"])).version() == bronze


def caught_up(project: Path, files: int) -> bool:
    """Bronze has ingested ``files`` landing files, and both streams that read
    it have read every row it wrote."""
    records = progress_records(project, "data/delta")
    rows = {
        query: sum(r["input_rows"] for r in records if r["query"] == query)
        for query in ("quarantined_trips", "hourly_borough_summary")
    }
    ingested = [r for r in records if r["query"] == "bronze_trips"]
    written = sum(r["rows_written"] for r in ingested)
    # One landing file per ingest batch (max_bytes_per_trigger=1).
    return len(ingested) >= files and all(n == written for n in rows.values())


def test_optimize_time_travel_and_vacuum_while_streams_run(fresh_project, project_bin):
    """A continuous run in the Delta environment: bronze is compacted and
    vacuumed while its query writes it and two streams read it. Readers go on
    with new data only (a compaction is no new data), an earlier version reads
    back until VACUUM deletes its files, and nothing is lost or counted twice."""
    landing = fresh_project / "data/01_raw/trips_landing"
    later = fresh_project / "later"
    later.mkdir()
    # Four of the example's files: two before the compaction, two after VACUUM.
    files = sorted(landing.glob("*.json"))
    for path in files[2:4]:
        path.rename(later / path.name)
    for path in files[4:]:
        path.unlink()
    # Delta refuses VACUUM below 7 days of retention unless told otherwise.
    with (fresh_project / "conf/delta/spark.yml").open("a") as spark_yml:
        spark_yml.write(
            "spark.databricks.delta.retentionDurationCheck.enabled: false\n"
        )
    bronze = fresh_project / "data/delta" / TABLES["bronze_trips"]

    log = fresh_project / "run.log"
    process = start_kedro(
        project_bin,
        fresh_project,
        ["run", *DELTA, "--params", f"trigger_interval=1 second,{FILE_BY_FILE}"],
        log,
    )
    try:
        wait_for(
            lambda: caught_up(fresh_project, 2),
            process,
            log,
            "the first 2 files read",
            seconds=240,
        )
        before = DeltaTable(str(bronze))
        version_before, files_before = before.version(), len(before.file_uris())
        rows_before = before.to_pandas()
        assert files_before >= 2

        compacted = streams(
            project_bin, fresh_project, "optimize", *DELTA, "bronze_trips"
        ).stdout
        assert re.search(
            rf"bronze_trips: {files_before} files compacted into 1, Delta version "
            rf"{version_before + 1}",
            compacted,
        ), compacted
        assert len(DeltaTable(str(bronze)).file_uris()) == 1
        # Time travel: the version before the compaction, file by file.
        old = DeltaTable(str(bronze), version=version_before)
        assert len(old.file_uris()) == files_before
        assert sorted(map(repr, old.to_pandas().itertuples(index=False))) == sorted(
            map(repr, rows_before.itertuples(index=False))
        )

        vacuumed = streams(
            project_bin,
            fresh_project,
            "vacuum",
            *DELTA,
            "bronze_trips",
            "--retain-hours",
            "0",
        ).stdout
        assert f"bronze_trips: {files_before} unused files deleted" in vacuumed
        with pytest.raises(Exception):  # its files are gone
            DeltaTable(str(bronze), version=version_before).to_pandas()

        for path in sorted(later.iterdir()):
            path.rename(landing / path.name)
        wait_for(
            lambda: caught_up(fresh_project, 4), process, log, "all 4 files read", 240
        )
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0, log.read_text()[-5000:]
    finally:
        if process.poll() is None:
            process.kill()

    # Every record once: in bronze, and (rejected) in the quarantine table.
    expected = example_reference(fresh_project)
    tables = fresh_project / "data/delta"
    valid, rejected = split_bronze(read_table(tables, TABLES["bronze_trips"]))
    assert len(valid) == len(expected.bronze)
    assert rejected.rejection_reason.value_counts().to_dict() == dict(
        expected.rejections
    )
    quarantined = read_table(tables, TABLES["quarantined_trips"])
    assert len(quarantined) == len(rejected)
    # The compaction's commit (no new data) was not read again downstream.
    records = progress_records(fresh_project, "data/delta")
    for query in ("quarantined_trips", "hourly_borough_summary"):
        assert sum(r["input_rows"] for r in records if r["query"] == query) == len(
            valid
        ) + len(rejected)
