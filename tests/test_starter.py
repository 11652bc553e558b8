"""The starter end to end: create a project, install it, run it, check its numbers."""

from __future__ import annotations

import json
import math
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
from conftest import PACKAGE, SHARED_DATA, STARTER_ROOT, quiet_env, run
from reference import SUMMARY_COLUMNS, csv_batch, expected_outputs, json_landing_batches, zone_boroughs

# Bounded, and one landing file (or bronze file) per micro-batch, as the
# reference replays them: the watermark then advances file by file.
FILE_BY_FILE = "max_bytes_per_trigger=1"
BOUNDED = ["--params", f"trigger=available_now,{FILE_BY_FILE}"]
# Bounded, as shipped: whatever has landed is one micro-batch.
AS_SHIPPED = ["--params", "trigger=available_now"]


def kedro_run(bin_dir: Path, project: Path, *args: str, params=BOUNDED) -> subprocess.CompletedProcess:
    return run([bin_dir / "kedro", "run", *args, *params], cwd=project, timeout=600)


def read_parquet(tables: Path, relative: str) -> pd.DataFrame:
    """Reads a Spark file sink as Spark does: only the files its log commits.

    After a crash the folder can hold files of a batch that never committed;
    the `_spark_metadata` log is what says which files belong to the table.
    """
    return pd.concat(pd.read_parquet(path) for path in committed_files(tables / relative))


def committed_files(folder: Path) -> list[Path]:
    log = folder / "_spark_metadata"
    batches = sorted(
        (entry for entry in log.iterdir() if entry.name[0].isdigit()),
        key=lambda entry: int(entry.name.split(".")[0]),
    )
    compacts = [i for i, entry in enumerate(batches) if entry.name.endswith(".compact")]
    files: set[str] = set()
    for entry in batches[compacts[-1] if compacts else 0:]:
        for line in entry.read_text().splitlines()[1:]:  # the first line is the version
            record = json.loads(line)
            (files.add if record["action"] == "add" else files.discard)(record["path"])
    assert files, f"{folder} has no committed files"
    return sorted(Path(path.removeprefix("file://")) for path in files)


def assert_matches_reference(project: Path, expected, output_root: str = "data") -> None:
    """Compares every output of a run with the independent computation."""
    tables = project / output_root
    bronze, quarantined = split_bronze(read_parquet(tables, "02_intermediate/bronze_trips"))
    summary = read_parquet(tables, "08_reporting/hourly_borough_summary")

    # Bronze: exactly the valid trips, field by field.
    keys = list(expected.bronze[0])
    want = pd.DataFrame(expected.bronze)[keys].astype(object).where(lambda f: f.notna(), None)
    got = bronze[keys].astype(object).where(lambda f: f.notna(), None)
    sort = lambda frame: sorted(tuple(row) for row in frame.itertuples(index=False))  # noqa: E731
    assert sort(got) == sort(want)

    # Quarantine: every other record, with its reason.
    assert quarantined["rejection_reason"].value_counts().to_dict() == dict(expected.rejections)
    # A Kafka tombstone has no payload; every other record keeps its own.
    assert quarantined.raw_payload.notna().sum() == len(quarantined) - expected.tombstones

    # Summary: every window and borough, every figure.
    got = summary.sort_values(["window_start", "pickup_borough"]).reset_index(drop=True)
    want = expected.summary
    assert list(zip(got.window_start, got.pickup_borough)) == list(
        zip(want.window_start, want.pickup_borough)
    )
    assert (got.window_end == want.window_end).all()
    for column in SUMMARY_COLUMNS:
        for got_value, want_value in zip(got[column], want[column]):
            assert math.isclose(got_value, want_value, rel_tol=1e-9, abs_tol=1e-9) or (
                math.isnan(got_value) and math.isnan(want_value)
            ), (column, got_value, want_value)


def split_bronze(bronze: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """bronze_trips' valid trips, and its rejected records (the quarantine)."""
    rejected = bronze.rejection_reason.notna()
    return bronze[~rejected], bronze[rejected]


def example_reference(project: Path, one_batch: bool = False):
    batches = json_landing_batches(project / "data/01_raw/trips_landing")
    return expected_outputs(
        [[record for batch in batches for record in batch]] if one_batch else batches,
        zone_boroughs(project / "data/01_raw/taxi_zone_lookup.csv"),
    )


def test_project_passes_ruff_and_its_own_tests_quickly(generated_project, project_bin, tmp_path):
    project = tmp_path / "project"
    shutil.copytree(generated_project, project)
    for path in project.rglob("*"):
        assert "cookiecutter" not in path.name
        if path.suffix in {".py", ".yml", ".toml", ".md", ".txt"}:
            assert "cookiecutter." not in path.read_text(), path
    run([project_bin / "ruff", "check", "."], cwd=project)

    result = run([project_bin / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=project)
    assert " passed" in result.stdout and "failed" not in result.stdout
    print(f"generated project's tests: {result.seconds:.1f} s")  # noqa: T201
    assert result.seconds < 120, f"the project's tests took {result.seconds:.0f} s"


def test_ingest_then_aggregate_matches_reference(fresh_project, project_bin):
    expected = example_reference(fresh_project)
    assert expected.late_trips > 0 and expected.rejections, "the sample must exercise both"

    kedro_run(project_bin, fresh_project, "--pipeline", "ingest")
    assert not (fresh_project / "data/08_reporting/hourly_borough_summary/_spark_metadata").exists()
    kedro_run(project_bin, fresh_project, "--pipeline", "aggregate")

    assert_matches_reference(fresh_project, expected)


def test_plain_run_on_a_fresh_project_matches_reference(fresh_project, project_bin):
    # As shipped, the landed files make one micro-batch: no trip is late within it.
    result = kedro_run(project_bin, fresh_project, params=AS_SHIPPED)
    log = result.stdout + result.stderr
    assert "Waiting for 'bronze_trips' to finish" in log
    expected = example_reference(fresh_project, one_batch=True)
    assert_matches_reference(fresh_project, expected)

    # The progress log's totals are the same figures.
    totals = {
        match["query"]: {key: int(value) for key, value in match.groupdict().items() if key != "query"}
        for match in re.finditer(
            r"Query (?P<query>\w+) ended: (?P<batches>\d+) batches, (?P<rows_in>\d+) rows in, "
            r"(?P<written>\d+) written, (?P<quarantined>\d+) quarantined, "
            r"(?P<dropped>\d+) dropped by watermark", log)
    }
    lines = sum(len(batch) for batch in json_landing_batches(fresh_project / "data/01_raw/trips_landing"))
    rejected = sum(expected.rejections.values())
    assert lines == len(expected.bronze) + rejected
    assert totals["bronze_trips"] == {"batches": 1, "rows_in": lines, "written": lines,
                                      "quarantined": rejected, "dropped": 0}
    summary = totals["hourly_borough_summary"]
    assert (summary["rows_in"], summary["written"]) == (lines, len(expected.summary))
    assert summary["dropped"] == expected.late_trips == 0
    assert len(re.findall(r"Query \w+ batch \d+: ", log)) == sum(t["batches"] for t in totals.values())
    # Spark's own logging stays at WARN.
    assert not re.search(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO ", log, re.MULTILINE)


def test_real_tlc_rows_and_zone_lookup(fresh_project, project_bin):
    """First rows of green-taxi January 2021 (negative fares, empty ehail_fee,
    trips from December) with the real zone lookup, through an environment."""
    trips_csv = SHARED_DATA / "green_tripdata_2021-01_head.csv"
    zones_csv = SHARED_DATA / "taxi_zone_lookup.csv"
    landing = fresh_project / "data/01_raw/tlc_csv"
    landing.mkdir(parents=True)
    shutil.copy(trips_csv, landing)
    tlc_env = fresh_project / "conf/tlc"
    tlc_env.mkdir()
    (tlc_env / "catalog.yml").write_text(
        f"""
raw_trips:
  type: {PACKAGE}.datasets.SparkStreamingDataset
  filepath: data/01_raw/tlc_csv
  file_format: csv
  load_args:
    schema:
      filepath: conf/base/schemas/raw_trips.json
    header: true
    columnNameOfCorruptRecord: _corrupt_record

taxi_zones:
  type: spark.SparkDataset
  filepath: {zones_csv}
  file_format: csv
  load_args:
    header: true
    schema: "LocationID INT, Borough STRING, Zone STRING, service_zone STRING"
"""
    )
    kedro_run(project_bin, fresh_project, "--env", "tlc")

    expected = expected_outputs([csv_batch(trips_csv)], zone_boroughs(zones_csv))
    # What real data brings, and where it goes.
    assert any("negative fare_amount" in reason for reason in expected.rejections)
    assert any(t["lpep_pickup_datetime"].month == 12 for t in expected.bronze)
    assert all(t["ehail_fee"] is None for t in expected.bronze)
    assert_matches_reference(fresh_project, expected)


def test_kedro_new_from_git_url_interactively(tmp_path):
    """`kedro new --starter <git url>`, answering the prompt, validated like Kedro."""
    repo = tmp_path / "starter.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(STARTER_ROOT), str(repo)], check=True)
    kedro_new = [sys.executable, "-m", "kedro", "new", "--starter", f"git+file://{repo}",
                 "--telemetry", "no"]

    refused = subprocess.run(kedro_new, cwd=tmp_path, input="x!\n", env=quiet_env(),
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0
    assert "alphanumeric" in refused.stdout + refused.stderr

    created = subprocess.run(kedro_new, cwd=tmp_path, input="My Stream Lab\n", env=quiet_env(),
                             capture_output=True, text=True, timeout=300)
    assert created.returncode == 0, created.stdout + created.stderr
    project = tmp_path / "my-stream-lab"
    assert (project / "src/my_stream_lab/hooks.py").is_file()
    assert (project / "data/01_raw/trips_landing/trips-0000.json").is_file()
    assert 'package_name = "my_stream_lab"' in (project / "pyproject.toml").read_text()
    catalog = (project / "conf/base/catalog.yml").read_text()
    assert "type: my_stream_lab.datasets.SparkStreamingDataset" in catalog
    spark_yml = (project / "conf/base/spark.yml").read_text()
    requirements = (project / "requirements.txt").read_text()
    version = next(
        line.split("==")[1] for line in requirements.splitlines() if line.startswith("pyspark==")
    )
    assert f"spark-sql-kafka-0-10_2.13:{version}" in spark_yml


def test_continuous_run_stops_cleanly_on_sigterm_and_resumes(fresh_project, project_bin):
    """Continuous mode: SIGTERM stops every query, exit 0, checkpoints consistent."""
    command = [project_bin / "kedro", "run", "--params", f"trigger_interval=1 second,{FILE_BY_FILE}"]
    log_path = fresh_project / "run.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(command, cwd=fresh_project, env=quiet_env(),
                                   stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 240
            while "Streaming queries running" not in log_path.read_text():
                assert process.poll() is None, log_path.read_text()[-5000:]
                assert time.monotonic() < deadline, "the run never started its queries"
                time.sleep(1)
            time.sleep(3)  # mid-stream: some batches done, more to come
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=120) == 0, log_path.read_text()[-5000:]
        finally:
            if process.poll() is None:
                process.kill()
    assert "Stopping streaming query" in log_path.read_text()

    # A bounded restart finishes the work: no loss, no duplicate.
    kedro_run(project_bin, fresh_project)
    assert_matches_reference(fresh_project, example_reference(fresh_project))


def test_failed_query_fails_the_run_with_its_name(fresh_project, project_bin):
    broken = fresh_project / "conf/broken"
    broken.mkdir()
    (broken / "catalog.yml").write_text(
        f"""
bronze_trips:
  type: {PACKAGE}.datasets.SparkStreamingDataset
  filepath: data/02_intermediate/bronze_trips
  file_format: parquet
  save_args:
    checkpoint: data/checkpoints/bronze_trips
    compression: no-such-codec
"""
    )
    result = run([project_bin / "kedro", "run", "--pipeline", "ingest", "--env", "broken"],
                 cwd=fresh_project, check=False, timeout=300)
    output = result.output
    assert result.returncode != 0
    assert "Streaming query 'bronze_trips' failed" in output
    assert "no-such-codec" in output
