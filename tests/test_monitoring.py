"""The project's monitoring (monitoring/: alert rules, Grafana dashboard, and
their Prometheus and Grafana services in docker-compose.yml), against the
series a real continuous run serves.

The rules and the dashboard's queries are evaluated by `promql`, whose
equality with promtool `test_promql.py` proves; where promtool is installed,
it evaluates the run's own series here too.
"""

from __future__ import annotations

import json
import os
import signal
import time
from itertools import cycle
from pathlib import Path

import yaml
from promql import (
    alert_states,
    evaluate,
    find_promtool,
    load_rules,
    run_promtool,
    write_promtool_test,
)
from support import (
    SHARED_DATA,
    Scraper,
    free_port,
    point_at_broker,
    progress_records,
    run,
    start_continuous_kafka_run,
)

# Scraped every second, evaluated as if every minute: the rules compare gauge
# values, signs of trends and ratios of rates, which this leaves unchanged, and
# their 5- and 10-minute windows then span 5 and 10 real scrapes.
STRETCH = 60.0
DASHBOARD = "monitoring/grafana/dashboards/kedro-streams.json"


def test_each_alert_fires_when_its_condition_is_provoked_and_none_otherwise(  # noqa: PLR0917 (fixtures)
    fresh_project,
    project_bin,
    broker_log_on_failure,
    project_tool,
    plugin_tool,
    tmp_path,
):
    """A continuous `kedro run --env kafka --pipelines ingest` of real TLC
    trips, scraped every second through five phases: healthy; one message in
    ten bad; the broker frozen (SIGSTOP) for 15 s; messages sent three times
    faster than the query may read them (maxOffsetsPerTrigger 200 at a
    1-second trigger); healthy again."""
    scraper, phases = run_through_phases(
        fresh_project,
        project_bin,
        broker_log_on_failure,
        project_tool("trips"),
        plugin_tool("kafka"),
    )
    samples = scraper.samples(step=STRETCH)
    rules = load_rules(fresh_project / "monitoring/alerts.yml")
    last = (len(scraper.scrapes) - 1) * STRETCH
    states = alert_states(rules, samples, 0.0, last, STRETCH)

    def alerts(phase: str, state: str) -> set[tuple[str, str]]:
        begin, end = phases[phase]
        return {
            (name, dict(labels)["query"])
            for index in range(begin, end)
            for name, labels, seen in states[index * STRETCH]
            if seen == state
        }

    firing = {phase: alerts(phase, "firing") for phase in phases}
    print_timeline(phases, states)
    assert firing == {
        "healthy": set(),
        "bad messages": {("KedroStreamQuarantineRateHigh", "bronze_trips")},
        "broker frozen": {("KedroStreamStalled", "bronze_trips")},
        "lag growing": {("KedroStreamKafkaLagGrowing", "bronze_trips")},
        "healthy again": set(),
    }, (fresh_project / "monitored.log").read_text()[-3000:]
    assert alerts("healthy", "pending") == set()

    # Each dashboard panel over the same series: all show data but the state
    # rows of stateful queries, which the ingest pipeline has none of.
    dashboard = json.loads((fresh_project / DASHBOARD).read_text())
    panels = {
        panel["title"]: [t["expr"].replace("$query", ".+") for t in panel["targets"]]
        for panel in dashboard["panels"]
    }
    real_samples = scraper.samples()  # at their own times: panels are not alerts
    empty = {
        title
        for title, queries in panels.items()
        if not any(
            evaluate(query, real_samples, at)
            for query in queries
            for at, _ in scraper.scrapes
        )
    }
    panel_queries = [query for queries in panels.values() for query in queries]
    assert empty == {"State rows"}

    first = min(series[0][0] for series in samples.values())
    if find_promtool():  # Prometheus' own evaluation, of the same series
        test_file = write_promtool_test(
            fresh_project / "monitoring/alerts.yml",
            samples,
            STRETCH,
            # From the first scrape with series (the endpoint serves before
            # the queries start): promtool's time 0.
            [at for at in range(0, int(last) + 1, int(STRETCH)) if at >= first],
            tmp_path / "alerts_test.yml",
            exprs=panel_queries,
        )
        result = run_promtool(test_file)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def print_timeline(phases: dict[str, tuple[int, int]], states: dict) -> None:
    """Each phase's scrapes, and at which ones the alerts changed (shown when
    the test fails)."""
    for phase, (begin, end) in phases.items():
        changes, before = [], None
        for index in range(begin, end):
            now = sorted({(name, seen) for name, _, seen in states[index * STRETCH]})
            if now != before:
                changes.append((index, now))
                before = now
        print(f"{phase}: scrapes {begin}-{end - 1}, alerts {changes}")


def run_through_phases(
    project: Path, project_bin: Path, broker, trips_tool, kafka_tool
) -> tuple[Scraper, dict[str, tuple[int, int]]]:
    """Runs the phases, scraping; returns the scrapes and each phase's span
    of scrape indices."""
    servers = broker.bootstrap_servers
    topic, _ = point_at_broker(project, servers, chunk=200)
    kafka_tool.ensure_topic(servers, topic, 2)
    real = list(
        trips_tool.file_messages(SHARED_DATA / "green_tripdata_2021-01_head.csv")
    )
    bad = [b"this is not json".decode()] + [
        json.dumps(trip) for trip in trips_tool.rule_breaking_trips()
    ]
    rows = cycle(real)

    def send(count: int, rate: float, bad_every: int = 0) -> None:
        messages = (
            bad[i % len(bad)] if bad_every and i % bad_every == 0 else next(rows)
            for i in range(count)
        )
        kafka_tool.send(messages, servers, topic, rate=rate, key=trips_tool.message_key)

    port = free_port()
    log_path = project / "monitored.log"
    process = start_continuous_kafka_run(
        project_bin,
        project,
        log_path,
        "--pipelines",
        "ingest",
        params=f"metrics_port={port}",
    )
    phases: dict[str, tuple[int, int]] = {}
    try:
        with Scraper(port) as scraper:
            send(200, rate=100)
            wait_for_rows_in_bronze(project, process, log_path)
            begin = scraper.mark()
            send(1000, rate=100)
            phases["healthy"] = (begin, scraper.mark())
            begin = scraper.mark()
            send(1000, rate=100, bad_every=10)
            send(600, rate=100)  # the quarantine share falls back under 5 %
            phases["bad messages"] = (begin, scraper.mark())
            begin = scraper.mark()
            os.kill(broker.pid, signal.SIGSTOP)
            try:
                time.sleep(15)
            finally:
                os.kill(broker.pid, signal.SIGCONT)
            time.sleep(3)
            phases["broker frozen"] = (begin, scraper.mark())
            begin = scraper.mark()
            send(9000, rate=600)
            time.sleep(5)  # the backlog drains: the lag shrinks
            phases["lag growing"] = (begin, scraper.mark())
            begin = scraper.mark()
            send(600, rate=100)
            phases["healthy again"] = (begin, scraper.mark())
        assert process.poll() is None, log_path.read_text()[-5000:]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0, log_path.read_text()[-5000:]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)

    return scraper, phases


def wait_for_rows_in_bronze(project: Path, process, log_path: Path) -> None:
    deadline = time.monotonic() + 180
    while not any(
        r["query"] == "bronze_trips" and r["input_rows"]
        for r in progress_records(project, "data/kafka")
    ):
        assert process.poll() is None, log_path.read_text()[-5000:]
        assert time.monotonic() < deadline, "no batch with rows in bronze_trips"
        time.sleep(1)


def test_compose_serves_the_shipped_monitoring(generated_project):
    """Prometheus scrapes the endpoint's default port with the shipped rules;
    Grafana gets the data source and the dashboard it names, from the files
    the compose file mounts."""
    compose = yaml.safe_load((generated_project / "docker-compose.yml").read_text())
    streaming = yaml.safe_load(
        (generated_project / "conf/base/streaming.yml").read_text()
    )
    prometheus, grafana = (
        compose["services"]["prometheus"],
        compose["services"]["grafana"],
    )

    def mounts(service: dict) -> dict[str, Path]:
        """Container path: project path, for the project's files it mounts."""
        found = {}
        for volume in service["volumes"]:
            source, target = volume.split(":")[:2]
            if source.startswith("./"):
                found[target] = generated_project / source
        return found

    prometheus_files = mounts(prometheus)
    config_path = next(
        arg.split("=", 1)[1]
        for arg in prometheus["command"]
        if arg.startswith("--config.file=")
    )
    config = yaml.safe_load(prometheus_files[config_path].read_text())
    for rule_file in config["rule_files"]:
        mounted = prometheus_files[str(Path(config_path).parent / rule_file)]
        assert mounted == generated_project / "monitoring/alerts.yml"
    (job,) = config["scrape_configs"]
    (target,) = job["static_configs"][0]["targets"]
    default_port = streaming["metrics_port"].rsplit(",", 1)[1].strip(" }")
    assert default_port == "9464"
    assert target == f"host.docker.internal:{default_port}"
    assert "host.docker.internal:host-gateway" in prometheus["extra_hosts"]
    assert "9090:9090" in prometheus["ports"]

    grafana_files = mounts(grafana)
    provisioning = grafana_files["/etc/grafana/provisioning"]
    (source,) = yaml.safe_load(
        (provisioning / "datasources/prometheus.yml").read_text()
    )["datasources"]
    assert source["url"] == "http://prometheus:9090" and source["type"] == "prometheus"
    (provider,) = yaml.safe_load(
        (provisioning / "dashboards/kedro-streams.yml").read_text()
    )["providers"]
    dashboards = grafana_files[provider["options"]["path"]]
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(provider["options"]["path"] + "/")
    dashboard = json.loads((dashboards / Path(home).name).read_text())
    uids = {
        target["datasource"]["uid"]
        for panel in dashboard["panels"]
        for target in panel["targets"]
    }
    assert uids == {source["uid"]}


def test_the_default_ports_are_held_and_a_taken_metrics_port_fails_at_once(
    default_ports_held, plugin_tool, fresh_project, project_bin
):
    """conftest.py holds the project's default ports all session, so a test
    that took one would fail. A run on the shipped metrics_port (9464, taken
    here) fails before Spark starts, in one line naming the port and the fix."""
    processes = plugin_tool("processes")
    free = [port for port in processes.DEFAULT_PORTS if processes.port_is_free(port)]
    assert free == [], f"held by this session: {default_ports_held}"
    result = run(
        [project_bin / "kedro", "run", "--params", "trigger=available_now"],
        cwd=fresh_project,
        env={"KEDRO_STREAMS_METRICS_PORT": None},  # as shipped: 9464
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "StreamingConfigError: Cannot serve the Prometheus metrics at "
        "127.0.0.1:9464 (Address already in use): run with `--params "
        "metrics_port=<a free port>` (another run may have this one), or "
        "`--params metrics_port=0` for no endpoint."
    )
    assert "Spark UI" not in result.output and "Traceback" not in result.output
