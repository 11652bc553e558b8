"""The starter end to end: create a project, install it, run it, check its numbers."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
from collections import Counter
from pathlib import Path

import yaml
from reference import (
    RULES,
    csv_batch,
    evaluate,
    example_settings,
    expected_outputs,
    json_landing_batches,
    zone_boroughs,
)
from support.common import (
    AS_SHIPPED,
    FILE_BY_FILE,
    PLUGIN_ROOT,
    PLUGIN_VERSION,
    SHARED_DATA,
    SHIPPED_JIT,
    STARTER_ROOT,
    free_port,
    kedro_run,
    quiet_env,
    run,
    streams,
)
from support.compare import (
    assert_expectation_counts,
    assert_matches_reference,
    example_reference,
)
from support.metrics import Scraper
from support.processes import start_kedro
from support.project import (
    USER_FOLDER,
    assert_tidy_home,
    generate_project,
    installed_from,
)
from support.prometheus import Prometheus


def test_project_passes_ruff_and_its_own_tests(
    generated_project, project_bin, tmp_path
):
    project = tmp_path / USER_FOLDER / "project"
    shutil.copytree(generated_project, project)
    assert_tidy_home(project, project_bin)
    # Made from a clone that is gone, installed after a move (the fixtures):
    # the plugin came from the project's own wheel, by a relative path.
    wheel = f"kedro_streaming-{PLUGIN_VERSION}-py3-none-any.whl"
    digest = hashlib.sha256((project / "wheels" / wheel).read_bytes()).hexdigest()
    requirements = (project / "requirements.txt").read_text()
    assert f"\n./wheels/{wheel}[dev]  # sha256:{digest}\n" in requirements
    assert "file:" not in requirements
    if not os.environ.get("STARTER_PROJECT_VENV"):  # that one holds a rebuilt plugin
        assert installed_from(project_bin, "kedro_streaming") == {
            "url": (generated_project / "wheels" / wheel).as_uri(),
            "archive_info": {"hash": f"sha256={digest}", "hashes": {"sha256": digest}},
        }

    # test_run.py runs the example bounded, which the tests below run too and
    # compare with the reference: left out here for CI's 45 minutes.
    result = run(
        [
            *(project_bin / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider"),
            "--ignore=tests/test_run.py",
        ],
        cwd=project,
        env=SHIPPED_JIT,
    )
    assert " passed" in result.stdout and "failed" not in result.stdout
    # No warning: a library's that the project cannot fix is filtered by name
    # in pyproject.toml, so that one of the project's own shows.
    assert "warnings summary" not in result.stdout, result.stdout
    # Reported, not asserted: how long they take depends on the machine.
    print(f"generated project's tests: {result.seconds:.1f} s")


def test_starter_tests_and_benchmarks_pass_ruff():
    for command in (["format", "--check"], ["check"]):
        run(
            [
                sys.executable,
                "-m",
                "ruff",
                *command,
                "tests",
                "benchmarks",
                "docs",
                "hooks",
            ],
            cwd=STARTER_ROOT,
        )


def test_docker_compose_agrees_with_conf_kafka(
    generated_project, broker_tool, plugin_tool
):
    """The compose file runs the Kafka version of tools/broker.py, where
    conf/kafka/globals.yml looks for it, and creates its topics; its schema
    registry checks compatibility as `kedro streams registry start`'s does."""
    compose = yaml.safe_load((generated_project / "docker-compose.yml").read_text())
    kafka = yaml.safe_load((generated_project / "conf/kafka/globals.yml").read_text())[
        "kafka"
    ]
    servers = kafka["bootstrap_servers"]
    port = servers.rpartition(":")[2]
    broker, topics = compose["services"]["kafka"], compose["services"]["topics"]

    image = f"apache/kafka:{broker_tool.KAFKA_VERSION}"
    assert broker["image"] == topics["image"] == image
    assert f"{port}:{port}" in broker["ports"]
    environment = broker["environment"]
    advertised = environment["KAFKA_ADVERTISED_LISTENERS"].split(",")
    assert f"PLAINTEXT://{servers}" in advertised
    assert environment["KAFKA_PROCESS_ROLES"] == "broker,controller"
    # The data in a named volume, so that it outlives the container.
    volume, folder = broker["volumes"][0].split(":")
    assert volume in compose["volumes"] and environment["KAFKA_LOG_DIRS"] == folder

    script = " ".join(topics["command"])
    assert "kafka-topics.sh" in script and "--create --if-not-exists" in script
    assert f"--bootstrap-server {servers}" in script
    for topic in (
        kafka["trips_topic"],
        kafka["summary_topic"],
        kafka["checked_trips_topic"],
        kafka["rejected_trips_topic"],
    ):
        assert topic in re.split(r"[\s;]+", script)
    assert topics["depends_on"]["kafka"]["condition"] == "service_healthy"

    # The schema registry: where kafka.schema_registry_url looks for it, its
    # schemas in Kafka through the listener other services reach. (Those
    # settings, apicurio.storage.kind=kafkasql and
    # apicurio.kafkasql.bootstrap.servers, were tried on the real registry.)
    registry = compose["services"]["schema-registry"]
    registry_port = urllib.parse.urlsplit(kafka["schema_registry_url"]).port
    assert f"{registry_port}:8080" in registry["ports"]
    assert registry["environment"]["APICURIO_STORAGE_KIND"] == "kafkasql"
    internal = registry["environment"]["APICURIO_KAFKASQL_BOOTSTRAP_SERVERS"]
    assert f"INTERNAL://{internal}" in advertised
    # The global compatibility `kedro streams registry start` sets (the
    # variable was tried on the real registry: GET /config says BACKWARD).
    assert (
        registry["environment"]["APICURIO_RULES_GLOBAL_COMPATIBILITY"]
        == plugin_tool("registry").GLOBAL_COMPATIBILITY
        == "BACKWARD"
    )


def test_kedro_commands_start_no_spark_and_viz_shows_the_pipelines(
    generated_project, project_bin, tmp_path
):
    """Only a run starts Spark: describing the catalog, listing or drawing the
    pipelines (hooks included) never resolves the Kafka connector nor starts a JVM."""
    project = tmp_path / "project"
    shutil.copytree(generated_project, project)
    kedro = project_bin / "kedro"
    commands = [
        [kedro, "catalog", "describe-datasets"],
        [kedro, "catalog", "describe-datasets", "--env", "kafka"],
        [kedro, "catalog", "describe-datasets", "--env", "delta"],
        [kedro, "registry", "list"],
        [kedro, "viz", "build", "--include-hooks"],
    ]
    for command in commands:
        result = run(command, cwd=project)
        print(f"{' '.join(map(str, command[1:]))}: {result.seconds:.1f} s")
        for spark_says in (
            "resolving dependencies",
            "Ivy",
            "Setting default log level",
        ):
            assert spark_says not in result.output, (command, result.output[-2000:])

    built = json.loads((project / "build/api/main").read_text())
    assert {p["id"] for p in built["pipelines"]} == {
        "__default__",
        "ingest",
        "aggregate",
        "zones",
        "live",
        "publish",
        "realtime",
        "dedupe",
    }
    default = json.loads((project / "build/api/pipelines/__default__").read_text())
    assert {n["name"] for n in default["nodes"] if n["type"] == "task"} == {
        "parse_trips",
        "check_trips",
        "select_valid_trips",
        "select_rejected_trips",
        "summarise_hourly_by_borough",
    }


def test_plain_run_on_a_fresh_project_matches_reference(fresh_project, project_bin):
    # As shipped, the landed files make one micro-batch: no trip is late within it.
    # Every deprecation shown, as Python hides them outside __main__.
    shown = "default::DeprecationWarning,default::PendingDeprecationWarning"
    result = kedro_run(
        project_bin, fresh_project, params=AS_SHIPPED, env={"PYTHONWARNINGS": shown}
    )
    log = result.stdout + result.stderr
    # None of Kedro's, Spark's or the plugin's: kafka-python's and kedro-viz's
    # own (importlib.resources, Click) are theirs to fix.
    deprecated = re.findall(
        r"site-packages/(\w+)/\S*\.py:\d+: (?:Pending)?DeprecationWarning",
        log,
    )
    assert not {"kedro", "pyspark", "kedro_streaming"} & set(deprecated), log
    assert "Waiting for 'bronze_trips' to finish" in log
    # The console has the run's lines, not the Kafka connector's resolution report.
    assert "Query bronze_trips batch 0:" in log
    assert "resolving dependencies" not in log and "artifacts copied" not in log
    expected = example_reference(fresh_project, one_batch=True)
    assert_matches_reference(fresh_project, expected)
    assert_expectation_counts(log, fresh_project, expected)

    # The progress log's totals are the same figures.
    totals = {
        match["query"]: {
            key: None if value is None else int(value)
            for key, value in match.groupdict().items()
            if key != "query"
        }
        for match in re.finditer(
            r"Query (?P<query>\w+) ended: (?P<batches>\d+) batches, (?P<rows_in>\d+) rows in, "
            r"(?P<written>\d+) written, (?P<quarantined>\d+) quarantined"
            r"(?:, (?P<late>\d+) late state rows dropped)?",
            log,
        )
    }
    lines = sum(
        len(batch)
        for batch in json_landing_batches(fresh_project / "data/01_raw/trips_landing")
    )
    rejected = sum(expected.rejections.values())
    assert lines == len(expected.bronze) + rejected
    assert totals["bronze_trips"] == {
        "batches": 1,
        "rows_in": lines,
        "written": lines,
        "quarantined": rejected,
        "late": None,  # stateless: no state, no late figure
    }
    summary = totals["hourly_borough_summary"]
    assert (summary["rows_in"], summary["written"]) == (lines, len(expected.summary))
    assert summary["late"] == sum(expected.late_groups_by_batch) == 0
    assert len(re.findall(r"Query \w+ batch \d+: ", log)) == sum(
        t["batches"] for t in totals.values()
    )
    # Spark's own logging stays at WARN.
    assert not re.search(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO ", log, re.MULTILINE)


def test_real_tlc_rows_and_zone_lookup(fresh_project, project_bin, project_tool):
    """First rows of green-taxi January 2021 (negative fares, empty ehail_fee,
    trips from December) with the real zone lookup, through an environment;
    then, as CSV rows too, trips that break each expectation."""
    trips_csv = SHARED_DATA / "green_tripdata_2021-01_head.csv"
    zones_csv = SHARED_DATA / "taxi_zone_lookup.csv"
    landing = fresh_project / "data/01_raw/tlc_csv"
    landing.mkdir(parents=True)
    shutil.copy(trips_csv, landing)
    rule_breakers = project_tool("trips").rule_breaking_trips()
    breakers_csv = landing / "rule_breakers.csv"
    with breakers_csv.open("w", newline="") as handle:
        columns = next(csv.reader(trips_csv.open()))
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rule_breakers)
    tlc_env = fresh_project / "conf/tlc"
    tlc_env.mkdir()
    (tlc_env / "catalog.yml").write_text(
        f"""
raw_trips:
  type: kedro_streaming.SparkStreamingDataset
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
    result = kedro_run(project_bin, fresh_project, "--env", "tlc")

    # The environment's source takes both files in one micro-batch.
    expected = expected_outputs(
        [csv_batch(trips_csv) + csv_batch(breakers_csv)],
        zone_boroughs(zones_csv),
        example_settings(fresh_project),
    )
    # What real data brings, and where it goes: the rows each rule catches.
    zone_ids = set(zone_boroughs(zones_csv))
    real = Counter(
        rule for row in csv_batch(trips_csv) for rule in evaluate(row, zone_ids).caught
    )
    assert real == {
        "fare_amount_range": 5,  # refunds: negative fare, taxes, total
        "mta_tax_range": 5,
        "improvement_surcharge_range": 5,
        "total_amount_range": 5,
        "total_covers_fare": 5,
        "trip_speed": 2,  # 0.13 and 0.15 miles in 3 seconds
        "passengers_recorded": 7,  # a warning: kept
    }
    # 7 real rows rejected; every rule breaker but the warned one.
    assert sum(expected.rejections.values()) == 7 + len(rule_breakers) - 1
    assert any(t["lpep_pickup_datetime"].month == 12 for t in expected.bronze)
    assert all(t["ehail_fee"] is None for t in expected.bronze)
    # Each rule caught something on the CSV path.
    assert set(sum(expected.batch_counts, Counter())) >= set(RULES)
    assert_matches_reference(fresh_project, expected)
    assert_expectation_counts(result.stdout + result.stderr, fresh_project, expected)


def test_kedro_new_from_git_url_interactively(tmp_path):
    """`kedro new --starter <git url>`, answering the prompt, validated like Kedro."""
    repo = tmp_path / "starter.git"
    subprocess.run(
        ["git", "clone", "-q", "--bare", str(STARTER_ROOT), str(repo)], check=True
    )
    kedro_new = [
        sys.executable,
        "-m",
        "kedro",
        "new",
        "--starter",
        f"git+file://{repo}",
        "--telemetry",
        "no",
    ]

    refused = run(kedro_new, cwd=tmp_path, input="x!\n", timeout=300, check=False)
    assert refused.returncode != 0
    assert "alphanumeric" in refused.stdout + refused.stderr

    # The name, then Enter for the defaults: the newest Spark line, the taxi example.
    created = run(
        kedro_new, cwd=tmp_path, input="My Stream Lab\n\n\n", timeout=300, check=False
    )
    assert created.returncode == 0, created.stdout + created.stderr
    project = tmp_path / "my-stream-lab"
    assert (project / "src/my_stream_lab/pipelines/ingest/nodes.py").is_file()
    assert not (project / "src/my_stream_lab/streaming").exists()
    assert (project / "data/01_raw/trips_landing/trips-0000.json").is_file()
    assert 'package_name = "my_stream_lab"' in (project / "pyproject.toml").read_text()
    catalog = (project / "conf/base/catalog.yml").read_text()
    assert "type: kedro_streaming.SparkStreamingDataset" in catalog
    # The plugin comes from the same git URL, pinned to the commit it was made
    # from (no --checkout: the default branch moves); pip builds it from there.
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    requirement = next(
        line.split("  #")[0]
        for line in (project / "requirements.txt").read_text().splitlines()
        if line.startswith("kedro-streaming")
    )
    assert requirement == (f"kedro-streaming[dev] @ git+file://{repo}@{head}")
    wheels = tmp_path / "wheels"
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            wheels,
            requirement,
        ],
        cwd=tmp_path,
        timeout=300,
    )
    assert [path.name for path in wheels.iterdir()] == [
        f"kedro_streaming-{PLUGIN_VERSION}-py3-none-any.whl"
    ]
    spark_yml = (project / "conf/base/spark.yml").read_text()
    requirements = (project / "requirements.txt").read_text()
    version = next(
        line.split("==")[1]
        for line in requirements.splitlines()
        if line.startswith("pyspark==")
    )
    assert f"spark-sql-kafka-0-10_2.13:{version}" in spark_yml


def test_continuous_run_stops_cleanly_on_sigterm_and_resumes(
    fresh_project, project_bin
):
    """Continuous mode: SIGTERM to the run's process group, as systemd sends
    it, stops every query cleanly: exit 0, checkpoints consistent."""
    command = [
        project_bin / "kedro",
        "run",
        "--params",
        # A file a batch, every 5 s: still at work when the SIGTERM comes,
        # after `status` and `reset` (at 2 s, a busy machine had written all
        # 8 batches 20 s after the start, before the SIGTERM).
        f"trigger_interval=5 seconds,{FILE_BY_FILE}",
    ]
    log_path = fresh_project / "run.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            command,
            cwd=fresh_project,
            env=quiet_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 240
            while "Streaming queries running" not in log_path.read_text():
                assert process.poll() is None, log_path.read_text()[-5000:]
                assert time.monotonic() < deadline, "the run never started its queries"
                time.sleep(1)
            # While it runs: `kedro streams status` says so, `reset` refuses.
            status = streams(project_bin, fresh_project, "status").stdout
            assert status.count(f"running (pid {process.pid} on ") == 3, status
            refused = streams(
                project_bin,
                fresh_project,
                "reset",
                "bronze_trips",
                "--yes",
                check=False,
            )
            assert refused.returncode != 0
            assert "running: stop that run before a reset" in refused.output
            assert (fresh_project / "data/checkpoints/bronze_trips").exists()
            assert not log_path.read_text().count("Query bronze_trips batch 7:")
            os.killpg(process.pid, signal.SIGTERM)
            assert process.wait(timeout=120) == 0, log_path.read_text()[-5000:]
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    output = log_path.read_text()
    assert "Stopping streaming query" in output
    assert "Py4J" not in output and "Traceback" not in output, output[-5000:]
    status = streams(project_bin, fresh_project, "status").stdout
    assert status.count("not running") == 3, status

    # A bounded restart finishes the work: no loss, no duplicate.
    kedro_run(project_bin, fresh_project)
    assert_matches_reference(fresh_project, example_reference(fresh_project))


BRONZE_FAILED = frozenset(
    {
        ("__name__", "kedro_stream_query_status"),
        ("query", "bronze_trips"),
        ("kedro_stream_query_status", "failed"),
    }
)
BRONZE_RUNNING = BRONZE_FAILED - {("kedro_stream_query_status", "failed")} | {
    ("kedro_stream_query_status", "running")
}


def test_failed_query_fails_the_run_with_its_name(fresh_project, project_bin, tmp_path):
    broken = fresh_project / "conf/broken"
    broken.mkdir()
    (broken / "catalog.yml").write_text(
        """
bronze_trips:
  type: kedro_streaming.SparkStreamingDataset
  filepath: data/02_intermediate/bronze_trips
  file_format: parquet
  save_args:
    checkpoint: data/checkpoints/bronze_trips
    compression: no-such-codec
"""
    )
    # A continuous run: it serves the failed status for 15 s before it exits,
    # long enough for Prometheus to scrape it and the alert to fire.
    port = free_port()
    log_path = fresh_project / "broken.log"
    args = ["run", "--pipelines", "ingest", "--env", "broken", "--params"]
    rules = fresh_project / "monitoring/alerts.yml"
    with (
        Prometheus(
            tmp_path / "prometheus", port, interval="500ms", rule_files=(rules,)
        ) as prometheus,
        Scraper(port, interval=0.5) as scraper,
    ):
        began = time.time()
        process = start_kedro(
            project_bin, fresh_project, [*args, f"metrics_port={port}"], log_path
        )
        returncode = process.wait(timeout=300)
        ended = time.time()
        statuses = prometheus.samples("kedro_stream_query_status", began, ended)
        alerts = prometheus.samples("ALERTS", began, ended)
    output = log_path.read_text()
    assert returncode != 0
    assert "Streaming query 'bronze_trips' failed" in output
    assert "no-such-codec" in output
    assert "Serving the failed status on the Prometheus endpoint for 15 s" in output

    failed = [
        at
        for at, values in scraper.scrapes
        if values.get(BRONZE_FAILED) == 1.0  # the enum's "failed" series
    ]
    # Served 15 s; the scrapes' times jitter, so the span seen is at least 14 s.
    assert failed[-1] - failed[0] >= 14
    # Prometheus, with the shipped rules: first the query running and no
    # alert; then, from its first scrape of the failed status to its last,
    # KedroStreamQueryFailed firing for bronze_trips, and no other alert.
    scraped = {("job", "kedro-streams"), ("instance", prometheus.target)}
    running = statuses[BRONZE_RUNNING | scraped]
    failed_seen = [at for at, value in statuses[BRONZE_FAILED | scraped] if value]
    evaluated = sorted({at for points in alerts.values() for at, _ in points})
    assert running[0][1] == 1.0 and running[0][0] < evaluated[0]
    assert {
        (dict(k)["alertname"], dict(k)["query"], dict(k)["alertstate"]) for k in alerts
    } == {("KedroStreamQueryFailed", "bronze_trips", "firing")}
    # Prometheus evaluates rules on its own clock, between scrapes whose times
    # are not known in advance: the alert's span can only be bounded by them.
    assert failed_seen[0] <= evaluated[0] and evaluated[-1] >= failed_seen[-1]


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def heading_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings (code blocks left out)."""
    text = re.sub(r"```.*?```", "", markdown, flags=re.DOTALL)
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def broken_links(root: Path) -> list[str]:
    """Every relative link of the Markdown pages under ``root`` whose file,
    or whose heading (#anchor), is not there."""
    broken = []
    for page in sorted(root.rglob("*.md")):
        if any(part.startswith(".") for part in page.relative_to(root).parts):
            continue
        text = page.read_text()
        for target in LINK.findall(re.sub(r"```.*?```", "", text, flags=re.DOTALL)):
            if "://" in target or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(root)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md":
                if anchor not in heading_anchors(linked.read_text()):
                    broken.append(
                        f"{page.relative_to(root)}: {target} (no such heading)"
                    )
    return broken


def test_every_docs_link_resolves_in_both_kinds_of_project(generated_project, tmp_path):
    """Cross-references are links, and each link's page and heading exist:
    in a project with the example, one without, the plugin and this
    repository. Prose that points by position ("X" above) names a heading
    of its own page."""
    without_example = generate_project(tmp_path, example="none")
    for root in (generated_project, without_example, PLUGIN_ROOT):
        assert broken_links(root) == [], root
        for page in sorted(root.glob("docs/*.md")):
            text = page.read_text()
            for quoted in re.findall(r'"([^"]+)" (?:above|below)', text):
                assert quoted.lower().replace(" ", "-") in heading_anchors(text), (
                    f'{page}: "{quoted}" is not a heading of the page: link it'
                )
    template = STARTER_ROOT / "{{ cookiecutter.repo_name }}"
    assert [
        problem
        for problem in broken_links(STARTER_ROOT)
        if not problem.startswith((template.name, PLUGIN_ROOT.name))
    ] == []
