"""Draws the plot of the progress log (rows per micro-batch) in docs/operating.md.

Creates a project from this starter in a temporary folder, runs the example
one landing file per micro-batch, loads ``data/streams/progress.jsonl`` with
pandas as docs/operating.md shows, and writes
``{{ cookiecutter.repo_name }}/docs/progress-log.png``. Run it with a Python
that has the project's requirements and matplotlib:

    pip install -r "{{ cookiecutter.repo_name }}/requirements.txt" matplotlib
    python docs/progress_plot.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

STARTER = Path(__file__).resolve().parents[1]
OUTPUT = STARTER / "{{ cookiecutter.repo_name }}" / "docs" / "progress-log.png"


def main() -> None:
    with tempfile.TemporaryDirectory() as workdir:
        config = Path(workdir) / "config.yml"
        config.write_text(
            f"project_name: Taxi Rides\noutput_dir: {workdir}\n"
            "spark_version: 4.2.0\nexample: taxi\n"
        )
        kedro = [sys.executable, "-m", "kedro"]
        env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "true"}
        subprocess.run(
            [*kedro, "new", "--starter", str(STARTER), "--config", str(config)]
            + ["--telemetry", "no"],
            check=True,
            cwd=workdir,
            env=env,
        )
        project = Path(workdir) / "taxi-rides"
        subprocess.run(
            [
                *kedro,
                "run",
                "--params",
                "trigger=available_now,max_bytes_per_trigger=1",
            ],
            check=True,
            cwd=project,
            env=env,
        )
        log = pd.read_json(project / "data/streams/progress.jsonl", lines=True)

    fig, (ingest, summary) = plt.subplots(1, 2, figsize=(10, 3.6))
    bronze = log[log["query"] == "bronze_trips"]
    ingest.bar(
        bronze["batch"], bronze["input_rows"] - bronze["quarantined"], label="valid"
    )
    ingest.bar(
        bronze["batch"],
        bronze["quarantined"],
        bottom=bronze["input_rows"] - bronze["quarantined"],
        label="quarantined",
    )
    ingest.set(title="bronze_trips: rows in per batch", xlabel="batch", ylabel="rows")
    ingest.set_ylim(0, bronze["input_rows"].max() * 1.4)  # room for the legend
    ingest.legend(loc="upper left", ncol=2)
    windows = log[log["query"] == "hourly_borough_summary"]
    summary.bar(windows["batch"], windows["rows_written"], label="windows written")
    summary.plot(
        windows["batch"],
        windows["late_state_rows_dropped"],
        "o-",
        color="C3",
        label="late (window, borough) groups dropped",
    )
    summary.set(title="hourly_borough_summary", xlabel="batch", ylabel="rows")
    summary.set_ylim(0, windows["rows_written"].max() * 1.5)
    summary.legend(loc="upper left")
    fig.tight_layout()
    OUTPUT.parent.mkdir(exist_ok=True)
    fig.savefig(OUTPUT, dpi=90)
    print(OUTPUT)


if __name__ == "__main__":
    main()
