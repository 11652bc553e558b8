"""Bounded runs side by side: the generated project against a hand-written script.

Creates a project from this starter (its own virtualenv, as a user would),
fills its landing folder with time-ordered TLC-shaped trips, then alternates,
round after round, on the same data and with the same PySpark and spark.yml:

- the whole example: ``handwritten.py --stage all`` and
  ``kedro run --params trigger=available_now``;
- ingest alone: ``handwritten.py --stage ingest`` and
  ``kedro run --pipeline ingest --params trigger=available_now``.

With ``--compare delta``, the pairs are the project's parquet tables
(``kedro run``) and its Delta environment (``kedro run --env delta``) instead.
With ``--compare declarative``, ``declarative.py`` (its work as SDP) replaces the script;
with ``--compare plan``, ``handwritten.py --plan project``: the project's own
nodes and rules started by hand, so the ratio is what `kedro run` adds to the
same plan.

The project's first run records the archive of Spark's classes that later
runs map (class-data sharing): when there is none yet, one ``kedro run`` of
ingest records it before the rounds, and its time is printed apart. With
``--share-classes``, the hand-written script maps that archive too, which
shows what the rest of the difference costs.

Every run starts from empty tables and checkpoints and prints its wall time;
the summary gives every round, the mean ratio and rows/s. ``--warm-up`` runs
each command unmeasured first; ``--instruments`` ends with one run of the
example under ``spark_instruments.py``: each query's planning, phase by phase
and rule by rule, and the code generated and compiled.

    python benchmarks/batch.py [--rows 1000000] [--files 20] [--rounds 2]
                               [--compare handwritten|plan|delta|declarative]
                               [--share-classes]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from breakdown import planning_lines

STARTER = HERE.parent
REAL_ZONES = STARTER.parent / "shared/reference-data/taxi_zone_lookup.csv"
BOUNDED = ["--params", "trigger=available_now"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--workdir", type=Path, default=Path("/tmp/kedro-streaming-bench")
    )
    parser.add_argument(
        "--zones",
        type=Path,
        default=REAL_ZONES if REAL_ZONES.is_file() else None,
        help="zone lookup CSV (default: TLC's, if ../shared has it; else the example's)",
    )
    parser.add_argument(
        "--compare",
        choices=("handwritten", "plan", "delta", "declarative"),
        default="handwritten",
        help="what `kedro run` is compared with: the hand-written script "
        "(default), the project's own plan started by hand, the same project "
        "with --env delta, or the script's work as a Spark Declarative Pipeline",
    )
    parser.add_argument(
        "--warm-up",
        type=int,
        default=1,
        help="unmeasured runs of each command before the rounds (page cache, "
        "the class archive)",
    )
    parser.add_argument(
        "--instruments",
        action="store_true",
        help="after the rounds, one `kedro run` of the example with Spark's "
        "instruments read inside it (spark_instruments.py): each query's "
        "planning by phase and rule, the code generated and compiled",
    )
    parser.add_argument(
        "--share-classes",
        action="store_true",
        help="the hand-written script maps the project's archive of Spark's classes",
    )
    args = parser.parse_args()

    project, python = bench_project(args.workdir)
    fill_landing(project, python, args.rows, args.files, args.zones)
    kedro = [python.parent / "kedro", "run"]
    archive = class_archive(project, python)
    if archive and not archive.exists():
        seconds, _ = timed(
            kedro + ["--pipeline", "ingest", *BOUNDED], project, args.workdir
        )
        print(f"first run (records {archive.name}): kedro ingest {seconds:.1f} s")
    script = handwritten_command(args, project, python, archive)
    pairs = {
        "example": (script + ["--stage", "all"], kedro + BOUNDED),
        "ingest": (
            script + ["--stage", "ingest"],
            kedro + ["--pipeline", "ingest", *BOUNDED],
        ),
    }
    names = ("plan by hand" if args.compare == "plan" else "hand-written", "kedro")
    if args.compare == "delta":
        delta = [*kedro, "--env", "delta"]
        pairs = {
            "example": (kedro + BOUNDED, delta + BOUNDED),
            "ingest": (
                kedro + ["--pipeline", "ingest", *BOUNDED],
                delta + ["--pipeline", "ingest", *BOUNDED],
            ),
        }
        names = ("parquet", "delta")
    if args.compare == "declarative":
        # spark-pipelines is a Spark Connect client (grpcio and the rest).
        subprocess.run(
            [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
            + ["pyspark[pipelines]"],
            check=True,
        )
        sdp = [python, HERE / "declarative.py", project, args.workdir / "declarative"]
        pairs = {
            "example": (sdp + ["--stage", "all"], kedro + BOUNDED),
            "ingest": (
                sdp + ["--stage", "ingest"],
                kedro + ["--pipeline", "ingest", *BOUNDED],
            ),
        }
        names = ("declarative", "kedro")
    for _ in range(args.warm_up):
        for by_hand, with_kedro in pairs.values():
            timed(by_hand, project, args.workdir)
            timed(with_kedro, project, args.workdir)
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in pairs}
    throughput: dict[str, list[str]] = {name: [] for name in pairs}
    for round_number in range(1, args.rounds + 1):
        for name, (by_hand, with_kedro) in pairs.items():
            hand_seconds, hand_output = timed(by_hand, project, args.workdir)
            kedro_seconds, kedro_output = timed(with_kedro, project, args.workdir)
            results[name].append((hand_seconds, kedro_seconds))
            throughput[name].append(rates((hand_output, kedro_output), names))
            print(
                f"round {round_number} {name:8s} {names[0]} {hand_seconds:6.1f} s"
                f"   {names[1]} {kedro_seconds:6.1f} s"
                f"   ratio {kedro_seconds / hand_seconds:.2f}",
                flush=True,
            )

    print(f"\n{args.rows:,} rows in {args.files} files, {os.cpu_count()} cores")
    for name, runs in results.items():
        ratios = [kedro / hand for hand, kedro in runs]
        print(
            f"{name:8s} {names[0]} {', '.join(f'{h:.1f}' for h, _ in runs)} s; "
            f"{names[1]} {', '.join(f'{k:.1f}' for _, k in runs)} s; "
            f"ratio {', '.join(f'{r:.2f}' for r in ratios)} (mean {sum(ratios) / len(ratios):.2f})"
        )
        print(f"         rows/s {throughput[name][-1]}")
    if args.instruments:
        read = args.workdir / "batch.instruments.json"
        seconds, _ = timed(
            [
                python,
                HERE / "spark_instruments.py",
                "--out",
                read,
                "--",
                "run",
                *BOUNDED,
            ],
            project,
            args.workdir,
        )
        print(f"\nkedro run of the example, instruments read ({seconds:.1f} s):")
        for line in planning_lines(json.loads(read.read_text())):
            print(f"  {line}")


def bench_project(workdir: Path) -> tuple[Path, Path]:
    """A project from this starter in ``workdir``, and its virtualenv's python."""
    venv = workdir / "venv"
    python = venv / "bin/python"
    project = workdir / "bench-project"
    if not project.is_dir():
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "config.yml").write_text(
            # Every answer of prompts.yml: the default Spark line, the example.
            f"project_name: Bench Project\noutput_dir: {workdir}\n"
            "spark_version: 4.2.0\nexample: taxi\n"
        )
        subprocess.run(
            [
                "kedro",
                "new",
                "--starter",
                str(STARTER),
                "--config",
                str(workdir / "config.yml"),
            ],
            check=True,
            env={**os.environ, "KEDRO_DISABLE_TELEMETRY": "true"},
        )
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        # From the project's root: its requirements name its wheel by a path
        # from there, as its README runs pip.
        subprocess.run([*pip, "-r", "requirements.txt"], check=True, cwd=project)
        subprocess.run([*pip, "--no-deps", "-e", project], check=True)
    # The plugin as it is in this checkout, whatever the project was made with.
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        + ["--no-deps", "--force-reinstall", STARTER],
        check=True,
    )
    return project, python


def kafka_spark_yml(project: Path, env_dir: Path, spark_conf: list[str]) -> None:
    """conf/kafka/spark.yml as shipped (if the project has one) in ``env_dir``,
    with ``spark_conf`` (``key=value`` settings) over it."""
    shipped = project / "conf/kafka/spark.yml"
    settings = yaml.safe_load(shipped.read_text()) if shipped.exists() else {}
    settings.update(setting.split("=", 1) for setting in spark_conf)
    if settings:
        (env_dir / "spark.yml").write_text(yaml.safe_dump(settings, width=1000))


def class_archive(project: Path, python: Path) -> Path | None:
    """The archive of Spark's classes the project's runs map, if they use one."""
    where = subprocess.run(
        [
            python,
            "-c",
            "from kedro_streaming._session.jvm import class_archive; "
            "print(class_archive({}) or '')",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()[-1]  # after the project's logging's own line
    return Path(where) if where else None


def fill_landing(
    project: Path, python: Path, rows: int, files: int, zones: Path | None
) -> None:
    """The benchmark's trips in the landing folder (kept while unchanged)."""
    workdir = project.parent
    landing = project / "data/01_raw/trips_landing"
    stamp = workdir / f"data-{rows}-{files}"
    # The stamp says which trips the landing holds; a project made anew holds
    # the example's files instead.
    if not stamp.exists() or len(list(landing.glob("trips-*.json"))) != files:
        shutil.rmtree(landing, ignore_errors=True)
        subprocess.run(
            [
                python,
                HERE / "trips.py",
                landing,
                "--rows",
                str(rows),
                "--files",
                str(files),
            ],
            check=True,
        )
        for old in workdir.glob("data-*"):
            old.unlink()
        stamp.touch()
    if zones:
        shutil.copyfile(zones, project / "data/01_raw/taxi_zone_lookup.csv")


def handwritten_command(
    args: argparse.Namespace, project: Path, python: Path, archive: Path | None
) -> list:
    """handwritten.py's command line: its plan, and the project's class
    archive when it is shared."""
    script = [python, HERE / "handwritten.py", project, args.workdir / "handwritten"]
    if args.share_classes:
        if not archive or not archive.exists():
            sys.exit("The project's runs use no class archive here.")
        script += ["--class-archive", archive]
    if args.compare == "plan":
        script += ["--plan", "project"]
    return script


def timed(command: list, project: Path, workdir: Path) -> tuple[float, str]:
    """Runs ``command`` in ``project`` from empty outputs; its wall time and output."""
    prepare_outputs(project, workdir)
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "true", "COLUMNS": "250"}
    started = time.monotonic()
    result = subprocess.run(
        [str(part) for part in command],
        cwd=project,
        env=env,
        check=False,
        capture_output=True,
        text=True,
    )
    seconds = time.monotonic() - started
    if result.returncode != 0:
        sys.exit(f"{command} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return seconds, result.stdout + result.stderr


def prepare_outputs(project: Path, workdir: Path) -> None:
    """Empty tables and checkpoints, the project's and the scripts'."""
    for folder in ("02_intermediate", "08_reporting", "checkpoints"):
        shutil.rmtree(project / "data" / folder, ignore_errors=True)
        (project / "data" / folder).mkdir()
    for folder in ("delta", "streams"):
        shutil.rmtree(project / "data" / folder, ignore_errors=True)
    for folder in ("handwritten", "declarative"):
        shutil.rmtree(workdir / folder, ignore_errors=True)


def rates(outputs: tuple[str, str], names: tuple[str, str]) -> str:
    """Rows/s per step of each run: the script's stages; each of the project's
    queries, over the time its micro-batches took."""
    parts = []
    for output, name in zip(outputs, names):
        parts += [
            f"{name} {stage} {int(rows) / float(seconds):,.0f}"
            for stage, rows, seconds in re.findall(
                r"^(\w+): (\d+) rows in ([\d.]+) s", output, re.MULTILINE
            )
        ]
        rows: dict[str, int] = {}
        millis: dict[str, int] = {}
        for query, rows_in, ms in re.findall(
            r"Query (\w+) batch \d+: (\d+) rows in, .*?(\d+) ms", output
        ):
            rows[query] = rows.get(query, 0) + int(rows_in)
            millis[query] = millis.get(query, 0) + int(ms)
        parts += [
            f"{name} {query} {rows[query] * 1000 / max(millis[query], 1):,.0f}"
            for query in rows
        ]
    return "; ".join(parts)


if __name__ == "__main__":
    main()
