"""Draws the Grafana dashboard's panels over a real run, for docs/operating.md.

Creates a project from this starter in a temporary folder, starts its Kafka
broker (`kedro streams broker start`), runs the example continuously
(`kedro run --env kafka`, a 1-second trigger) while the project's producer
sends real TLC trips (``../shared/reference-data``) at 100 messages/s, then
the trips that break each expectation, while a real Prometheus (Debian's
`prometheus` package, as the tests run it) scrapes the run's endpoint every
second. Each panel of ``monitoring/grafana/dashboards/kedro-streams.json`` is
then queried from that Prometheus, query by query, over the run (its HTTP
API's range queries, a point a second) and drawn as Grafana lays it out, into
``{{ cookiecutter.repo_name }}/docs/dashboard.png``. Run it with a Python that
has the starter's test requirements and matplotlib:

    pip install -r tests/requirements.txt matplotlib
    python docs/dashboard_plot.py [--seconds 240]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STARTER = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(STARTER / "tests"))
from support.common import SHARED_DATA, free_port  # noqa: E402
from support.project import install_project  # noqa: E402
from support.prometheus import Prometheus  # noqa: E402

OUTPUT = STARTER / "{{ cookiecutter.repo_name }}" / "docs" / "dashboard.png"
DASHBOARD = "monitoring/grafana/dashboards/kedro-streams.json"
RATE = 100  # messages a second


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=240, help="how long to run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        project, python = new_project(Path(workdir))
        port = free_port()
        with Prometheus(Path(workdir) / "prometheus", port) as prometheus:
            started = run(project, python, port, args.seconds)
            dashboard = json.loads((project / DASHBOARD).read_text())
            draw(dashboard, prometheus, started, time.time())


def new_project(workdir: Path) -> tuple[Path, Path]:
    config = workdir / "config.yml"
    config.write_text(
        f"project_name: Taxi Rides\noutput_dir: {workdir}\n"
        "spark_version: 4.2.0\nexample: taxi\n"
    )
    subprocess.run(
        [sys.executable, "-m", "kedro", "new", "--starter", str(STARTER)]
        + ["--config", str(config), "--telemetry", "no"],
        check=True,
        cwd=workdir,
        env={**os.environ, "KEDRO_DISABLE_TELEMETRY": "true"},
    )
    project = workdir / "taxi-rides"
    bin_dir = install_project(project, workdir / "venv")
    return project, bin_dir / "python"


def run(project: Path, python: Path, port: int, seconds: int) -> float:
    """Runs the example, its metrics on ``port``; returns when it began."""
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "true"}
    tools = [python, "-m", "tools"]
    devtools = [python, "-m", "kedro_streaming.devtools"]
    subprocess.run([*devtools, "broker", "start"], check=True, cwd=project, env=env)
    process = subprocess.Popen(
        [python, "-m", "kedro", "run", "--env", "kafka", "--params"]
        + [f"trigger_interval=1 second,metrics_port={port}"],
        cwd=project,
        env=env,
        start_new_session=True,
    )
    send = [*tools, "trips", "send", "--rate", str(RATE)]
    trips = SHARED_DATA / "green_tripdata_2021-01_head.csv"  # 596 real trips
    try:
        started = time.time()
        healthy = int(seconds * 0.6)
        for _ in range(healthy * RATE // 596):
            subprocess.run([*send, "--source", trips], check=True, cwd=project, env=env)
        subprocess.run([*send, "--rule-breakers"], check=True, cwd=project, env=env)
        time.sleep(max(0.0, started + seconds - time.time()))
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
        subprocess.run([*devtools, "broker", "stop"], check=False, cwd=project, env=env)
    return started


def draw(dashboard: dict, prometheus: Prometheus, started: float, end: float) -> None:
    panels = sorted(
        dashboard["panels"], key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"])
    )
    rows = (len(panels) + 1) // 2
    fig, axes = plt.subplots(rows, 2, figsize=(13, 2.6 * rows), sharex=True)
    for ax, panel in zip(axes.flat, panels, strict=False):
        for target in panel["targets"]:
            lines: dict[str, list[tuple[float, float]]] = {}
            expr = target["expr"].replace("$query", ".+")
            ranged = prometheus.api(
                "query_range", query=expr, start=started, end=end, step=1
            )
            for series in ranged["result"]:
                legend = legend_of(target["legendFormat"], series["metric"])
                lines.setdefault(legend, []).extend(
                    (float(at) - started, float(value))
                    for at, value in series["values"]
                )
            for legend, points in sorted(lines.items()):
                xs, ys = zip(*points, strict=True)
                if panel["type"] == "state-timeline":
                    ax.plot(xs, [legend] * len(xs), "|", markersize=8, label=legend)
                else:
                    ax.plot(xs, ys, label=legend, linewidth=1.2)
        ax.set_title(panel["title"], fontsize=10, loc="left")
        ax.tick_params(labelsize=8)
        if ax.has_data() and panel["type"] != "state-timeline":
            ax.legend(fontsize=7, loc="upper left")
    for ax in axes[-1]:
        ax.set_xlabel("seconds since the first message", fontsize=8)
    when = datetime.fromtimestamp(started, timezone.utc).strftime("%Y-%m-%d %H:%M")
    fig.suptitle(f"Kedro streams: the dashboard's queries over a run ({when} UTC)")
    fig.tight_layout()
    fig.savefig(OUTPUT, dpi=80)
    print(OUTPUT)


def legend_of(template: str, labels: dict[str, str]) -> str:
    """Grafana's ``{{label}}`` legend format."""
    for name, value in labels.items():
        template = template.replace("{{" + name + "}}", value)
    return template


if __name__ == "__main__":
    main()
