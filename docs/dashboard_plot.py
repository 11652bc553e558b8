"""Draws the Grafana dashboard's panels over a real run, for docs/operating.md.

Creates a project from this starter in a temporary folder, starts its Kafka
broker (`kedro streams broker start`), runs the example continuously
(`kedro run --env kafka`, a 1-second trigger) while the project's producer
sends real TLC trips (``../shared/reference-data``) at 100 messages/s, then
the trips that break each expectation, and scrapes the run's Prometheus endpoint every second. Each panel of
``monitoring/grafana/dashboards/kedro-streams.json`` is then evaluated, query by
query, over the scraped series (with the tests' PromQL evaluation, which
`tests/test_promql.py` proves equal to Prometheus') and drawn as Grafana lays it
out, into ``{{ cookiecutter.repo_name }}/docs/dashboard.png``. Run it with a
Python that has the starter's test requirements and matplotlib:

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
from promql import evaluate  # noqa: E402
from support import SHARED_DATA, Scraper, free_port, install_project  # noqa: E402

OUTPUT = STARTER / "{{ cookiecutter.repo_name }}" / "docs" / "dashboard.png"
DASHBOARD = "monitoring/grafana/dashboards/kedro-streams.json"
RATE = 100  # messages a second


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=240, help="how long to run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        project, python = new_project(Path(workdir))
        scraper, started = run_and_scrape(project, python, args.seconds)
        dashboard = json.loads((project / DASHBOARD).read_text())
    draw(dashboard, scraper, started)


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


def run_and_scrape(project: Path, python: Path, seconds: int):
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "true"}
    tools = [python, "-m", "tools"]
    devtools = [python, "-m", "kedro_streaming.devtools"]
    subprocess.run([*devtools, "broker", "start"], check=True, cwd=project, env=env)
    port = free_port()
    run = subprocess.Popen(
        [python, "-m", "kedro", "run", "--env", "kafka", "--params"]
        + [f"trigger_interval=1 second,metrics_port={port}"],
        cwd=project,
        env=env,
        start_new_session=True,
    )
    send = [*tools, "trips", "send", "--rate", str(RATE)]
    trips = SHARED_DATA / "green_tripdata_2021-01_head.csv"  # 596 real trips
    try:
        with Scraper(port) as scraper:
            started = time.time()
            healthy = int(seconds * 0.6)
            for _ in range(healthy * RATE // 596):
                subprocess.run(
                    [*send, "--source", trips], check=True, cwd=project, env=env
                )
            subprocess.run([*send, "--rule-breakers"], check=True, cwd=project, env=env)
            time.sleep(max(0.0, started + seconds - time.time()))
    finally:
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=120)
        subprocess.run([*devtools, "broker", "stop"], check=False, cwd=project, env=env)
    return scraper, started


def draw(dashboard: dict, scraper: Scraper, started: float) -> None:
    samples = scraper.samples()
    times = [at for at, _ in scraper.scrapes]
    panels = sorted(
        dashboard["panels"], key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"])
    )
    rows = (len(panels) + 1) // 2
    fig, axes = plt.subplots(rows, 2, figsize=(13, 2.6 * rows), sharex=True)
    for ax, panel in zip(axes.flat, panels, strict=False):
        for target in panel["targets"]:
            lines: dict[str, list[tuple[float, float]]] = {}
            for at in times:
                expr = target["expr"].replace("$query", ".+")
                for labels, value in evaluate(expr, samples, at).items():
                    legend = legend_of(target["legendFormat"], dict(labels))
                    lines.setdefault(legend, []).append((at - started, value))
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
