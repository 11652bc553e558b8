"""The project's monitoring (monitoring/: alert rules and their promtool
unit tests, Grafana dashboard, and their Prometheus and Grafana services in
docker-compose.yml), with the real Prometheus and promtool: the rules' own
tests, and a Prometheus scraping a real continuous run.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from itertools import cycle
from pathlib import Path

import yaml
from support.common import SHARED_DATA, free_port, run
from support.kafka import point_at_broker
from support.metrics import progress_records, unix_time
from support.processes import start_continuous_kafka_run
from support.prometheus import Prometheus, promtool, scaled_rules

DASHBOARD = "monitoring/grafana/dashboards/kedro-streams.json"
ALERTS = ("KedroStreamQueryFailed", "KedroStreamStalled")
ALERTS += ("KedroStreamKafkaLagGrowing", "KedroStreamQuarantineRateHigh")
ALERTS += ("KedroStreamStateGrowing",)


def test_shipped_alert_rules_pass_their_own_promtool_tests(generated_project, tmp_path):
    """`promtool check rules` and `promtool test rules` on the project's
    monitoring/alerts_test.yml (exact alerts, labels and annotations, at
    given times, over given series), which covers every rule: each rule
    made never to fire fails the tests, naming it."""
    monitoring = generated_project / "monitoring"
    checked = promtool("check", "rules", monitoring / "alerts.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in checked.stdout
    tested = promtool("test", "rules", monitoring / "alerts_test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    rules = yaml.safe_load((monitoring / "alerts.yml").read_text())
    assert [r["alert"] for r in rules["groups"][0]["rules"]] == list(ALERTS)
    (tmp_path / "alerts_test.yml").write_text(
        (monitoring / "alerts_test.yml").read_text()
    )
    for index, name in enumerate(ALERTS):
        broken = yaml.safe_load((monitoring / "alerts.yml").read_text())
        broken["groups"][0]["rules"][index]["expr"] = "vector(1) == 0"
        (tmp_path / "alerts.yml").write_text(yaml.safe_dump(broken))
        failed = promtool("test", "rules", tmp_path / "alerts_test.yml")
        assert failed.returncode == 1, name
        assert f"alertname: {name}," in failed.stdout + failed.stderr, name


def test_each_alert_fires_when_its_condition_is_provoked_and_none_otherwise(  # noqa: PLR0917 (fixtures)
    fresh_project,
    project_bin,
    broker_log_on_failure,
    project_tool,
    plugin_tool,
    tmp_path,
):
    """A continuous `kedro run --env kafka --pipelines ingest` of real TLC
    trips, scraped every second by a real Prometheus through five phases:
    healthy; one message in ten bad; the broker frozen (SIGSTOP) for 15 s;
    messages sent three times faster than the query may read them
    (maxOffsetsPerTrigger 200 at a 1-second trigger); healthy again. The
    shipped rules, their minutes read as seconds (`scaled_rules`), fire
    exactly the phase's alert; then, the run at rest, each dashboard panel's
    queries give the run's own figures."""
    port = free_port()
    rules = scaled_rules(fresh_project / "monitoring/alerts.yml", tmp_path / "a.yml")
    dashboard = json.loads((fresh_project / DASHBOARD).read_text())
    with Prometheus(
        tmp_path / "prometheus", port, rule_files=(rules,), lookback="5s"
    ) as prometheus:
        phases, panels = run_through_phases(
            fresh_project,
            project_bin,
            broker_log_on_failure,
            project_tool("trips"),
            plugin_tool("kafka"),
            port,
            lambda: panels_at_rest(prometheus, fresh_project, dashboard),
            lambda: wait_until_no_alert(prometheus),
        )
        start, end = phases["healthy"][0], phases["healthy again"][1]
        alerts_seen = prometheus.samples("ALERTS", start, end + 2)
        (scrapes,) = prometheus.samples("up", start - 2, end + 2).values()
    # Each evaluation counts in the phase of the newest scrape it saw (as
    # Prometheus, the rules run on their own clock, up to a second after).
    scraped = sorted(at for at, _ in scrapes)
    states = {
        key: [(max(s for s in scraped if s <= at), v) for at, v in points]
        for key, points in alerts_seen.items()
    }

    def alerts(phase: str, state: str) -> set[tuple[str, str]]:
        begin, end = phases[phase]
        return {
            (labels["alertname"], labels["query"])
            for labels, points in ((dict(k), v) for k, v in states.items())
            if labels["alertstate"] == state
            and any(begin <= at < end for at, _ in points)
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

    got, want = panels
    assert got == want


def panels_at_rest(prometheus: Prometheus, project: Path, dashboard: dict):
    """Each dashboard panel's queries (``$query`` all of them), by Prometheus,
    once the run has read every message and Prometheus has scraped its last
    batch; and what the run's progress log says they give. Returns both as
    ``{panel title: [result of each query]}``."""
    deadline = time.monotonic() + 120
    while True:  # every message read: the last batch's lag is 0, no batch since
        records = progress_records(project, "data/kafka")
        lags = [
            lag
            for source in records[-1]["sources"]
            for partitions in (source["kafka_lag"] or {}).values()
            for lag in partitions.values()
        ]
        if lags and not any(lags):
            time.sleep(3)
            if len(progress_records(project, "data/kafka")) == len(records):
                break
        assert time.monotonic() < deadline, records[-1]
        time.sleep(1)
    logged: dict[str, list[dict]] = {}
    for record in records:
        logged.setdefault(record["query"], []).append(record)
    at = prometheus.wait_for(
        "sum by (query) (kedro_stream_batches_total)",
        {frozenset({("query", q)}): float(len(rs)) for q, rs in logged.items()},
    )
    first = min(unix_time(r["time"]) for r in records)
    got, want = {}, {}
    for panel in dashboard["panels"]:
        exprs = [t["expr"].replace("$query", ".+") for t in panel["targets"]]
        got[panel["title"]] = [prometheus.query(expr, at) for expr in exprs]
        want[panel["title"]] = [
            expected(expr, result, logged, prometheus.target)
            for expr, result in zip(exprs, got[panel["title"]])
        ]
        if "expectation_records_total" in exprs[0]:
            # Which rules grew in the last minute depends on when Prometheus
            # scraped; which ever did over the run is known.
            (expr,) = exprs
            shown = prometheus.api(
                "query_range", query=expr, start=first, end=at, step=1
            )["result"]
            got[panel["title"]] = [
                {(s["metric"]["query"], s["metric"]["rule"]) for s in shown}
            ]
            want[panel["title"]] = [grown_rules(logged)]
    return got, want


def expected(expr: str, result: dict, logged: dict, target: str) -> dict:
    """What ``expr`` gives at rest, from the progress log (``logged``: each
    query's records); where that is not knowable exactly, ``result``'s values
    under the labels the log gives."""
    scrape = {("job", "kedro-streams"), ("instance", target)}
    status = {("__name__", "kedro_stream_query_status"), *scrape}
    since = {("__name__", "kedro_stream_seconds_since_last_batch"), *scrape}
    lags = Counter()
    for query, records in logged.items():
        for source in records[-1]["sources"]:
            for topic, partitions in (source["kafka_lag"] or {}).items():
                lags[query, topic] += sum(partitions.values())
    late = sum(r["late_state_rows_dropped"] for rs in logged.values() for r in rs)
    stateless = all(rs[-1]["state_rows"] is None for rs in logged.values())
    known = {
        "kedro_stream_query_status": {
            frozenset({("query", q), ("kedro_stream_query_status", "running")})
            | status: 1.0
            for q in logged
        },
        # The run's 1-second trigger.
        "10 * kedro_stream_trigger_interval_seconds": {
            frozenset({("query", q), *scrape}): 10.0 for q in logged
        },
        "sum by (query, topic) (kedro_stream_kafka_lag_messages": {
            frozenset({("query", q), ("topic", t)}): float(lag)
            for (q, t), lag in lags.items()
        },
        # The ingest pipeline's queries hold no state, so drop no late rows:
        # their counters stayed at 0, whose rate is 0.
        "kedro_stream_state_rows": {} if stateless else None,
        "kedro_stream_state_operator_rows": {} if stateless else None,
        "kedro_stream_state_operator_memory_bytes": {} if stateless else None,
        "sum by (query) (rate(kedro_stream_late_state_rows_dropped_total": {
            frozenset({("query", q)}): 0.0 for q in logged
        }
        if late == 0
        else None,
    }
    for start, value in known.items():
        if expr.startswith(start):
            assert value is not None, f"not at rest: {expr}"
            return value
    # A rate, a quantile of batch durations, or the seconds since the last
    # batch: each depends on when Prometheus scraped, so only its series are
    # known (one per query, with these labels).
    keep = since if expr.startswith("kedro_stream_seconds_since") else set()
    return {
        key: result.get(key)
        for key in (frozenset({("query", q), *keep}) for q in logged)
    }


def grown_rules(logged: dict) -> set[tuple[str, str]]:
    """The (query, rule) pairs the per-rule panel showed over the run: the
    count of the rule grew between two scrapes, so a batch after the first
    that counted it counted it too (Prometheus first sees a rule's series
    with that first count in it)."""
    grown = set()
    for query, records in logged.items():
        batches = Counter(
            rule for r in records for rule, n in r["expectations"].items() if n
        )
        grown |= {(query, rule) for rule, n in batches.items() if n > 1}
    return grown


def print_timeline(phases: dict[str, tuple[float, float]], states: dict) -> None:
    """Each phase's alerts, and when (seconds into the phase) each was first
    and last seen (shown when the test fails)."""
    for phase, (begin, end) in phases.items():
        seen = {}
        for key, points in states.items():
            labels = dict(key)
            times = [at - begin for at, _ in points if begin <= at < end]
            if times:
                name = (labels["alertname"], labels["alertstate"])
                seen[name] = (round(min(times), 1), round(max(times), 1))
        print(f"{phase}: {end - begin:.0f} s, alerts {sorted(seen.items())}")


HEALTHY = 40  # messages a second


def run_through_phases(  # noqa: PLR0913, PLR0917 (the test's parts)
    project: Path,
    project_bin: Path,
    broker,
    trips_tool,
    kafka_tool,
    port: int,
    at_end,
    settled,
) -> tuple[dict[str, tuple[float, float]], object]:
    """Runs the phases, the metrics endpoint on ``port``; returns each phase's
    span (Unix times) and what ``at_end()`` returned after the last phase,
    before the run is stopped. A phase ends once its cause is gone and
    ``settled()`` has returned: its alert resolved, so that none is carried
    into the next (on a busy machine the query's batches take longer, and
    the lag it reports trails)."""
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

    log_path = project / "monitored.log"
    process = start_continuous_kafka_run(
        project_bin,
        project,
        log_path,
        "--pipelines",
        "ingest",
        params=f"metrics_port={port}",
    )
    phases: dict[str, tuple[float, float]] = {}
    # Healthy: 40 messages a second, a fifth of what the query may read a
    # second (maxOffsetsPerTrigger 200 at a 1-second trigger), so that it
    # keeps up when its batches take twice as long on a busy machine (at 100
    # a second, a busy CI runner once saw the lag grow while healthy).
    try:
        send(80, rate=HEALTHY)
        wait_for_rows_in_bronze(project, process, log_path)
        for phase, provoke in {
            "healthy": lambda: send(400, rate=HEALTHY),
            # Then the quarantine share falls back under 5 %.
            "bad messages": lambda: (
                send(400, rate=HEALTHY, bad_every=10),
                send(240, rate=HEALTHY),
            ),
            "broker frozen": lambda: freeze(broker.pid, 15),
            # Then the backlog drains: the lag shrinks.
            "lag growing": lambda: (send(9000, rate=600), time.sleep(5)),
            "healthy again": lambda: send(240, rate=HEALTHY),
        }.items():
            begin = time.time()
            provoke()
            settled()
            phases[phase] = (begin, time.time())
        assert process.poll() is None, log_path.read_text()[-5000:]
        ended = at_end()
        assert process.poll() is None, log_path.read_text()[-5000:]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0, log_path.read_text()[-5000:]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)

    return phases, ended


def freeze(pid: int, seconds: float) -> None:
    """Stops the process ``seconds`` (SIGSTOP), then 3 s more for it to
    answer again."""
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)
    time.sleep(3)


def wait_until_no_alert(prometheus: Prometheus, timeout: float = 120) -> None:
    """Until Prometheus's rules, evaluated every second, show no alert, pending
    or firing, twice in a row."""
    deadline = time.monotonic() + timeout
    quiet = 0
    while quiet < 2:
        alerts = prometheus.query("ALERTS", time.time())
        assert time.monotonic() < deadline, f"alerts still on: {alerts}"
        quiet = 0 if alerts else quiet + 1
        time.sleep(1)


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
    plugin_tool, fresh_project, project_bin
):
    """conftest.py holds the project's default ports all session, so a test
    that took one would fail. A run on the shipped metrics_port (9464, taken
    here) fails before Spark starts, in one line naming the port and the fix."""
    processes = plugin_tool("processes")
    free = [port for port in processes.DEFAULT_PORTS if processes.port_is_free(port)]
    assert free == [], "not held by this session (were they taken when it began?)"
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
