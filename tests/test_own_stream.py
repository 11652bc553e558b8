"""A user's own stream: a project made without the example, the walkthrough
of its docs run as written, the plugin upgraded under it, and streaming added
to a project made by Kedro's own template.

The projects share the default project's virtualenv (installed without
dependencies: they need the same ones), so they cost no second PySpark.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import textwrap
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd
import yaml
from support.common import (
    AS_SHIPPED,
    PLUGIN_ROOT,
    PLUGIN_VERSION,
    SHIPPED_JIT,
    STARTER_ROOT,
    quiet_env,
    run,
)
from support.project import assert_tidy_home, venv_like, walkthrough_project

NAME = "Sensor Lab"
PACKAGE = "sensor_lab"
# The records pipeline's shipped schema and rule, computed here by hand.
PLAUSIBLE = (-50.0, 60.0)


def expected_checked(
    lines: list[str], rule: str = "temperature_plausible", plausible=PLAUSIBLE
) -> list[tuple]:
    """(device, at, temperature_c, rejection_reason) of each JSON line, by the
    rules of parse_records, the schema and the one expectation, ``rule``:
    ``plausible[0] <= temperature_c <= plausible[1]``."""
    rows = []
    for line in lines:
        record = json.loads(line)
        at = datetime.fromisoformat(record["at"].replace("Z", "+00:00"))
        at = at.replace(tzinfo=None)
        value = record.get("temperature_c")
        typed = float(value) if isinstance(value, int | float) else None
        problems = []
        if value is not None and typed is None:
            problems.append("invalid temperature_c")
        if record.get("device") is None:
            problems.append("missing device")
        if (
            not problems
            and typed is not None
            and not (plausible[0] <= typed <= plausible[1])
        ):
            problems.append(rule)
        rows.append((record.get("device"), at, typed, "; ".join(problems) or None))
    return sorted(rows, key=str)


def rejected(rows: list[tuple]) -> list[tuple]:
    """The rows with a rejection_reason: the quarantine's."""
    return [row for row in rows if row[3] is not None]


def checked_rows(table: Path) -> list[tuple]:
    """(device, at, temperature_c, rejection_reason) of each row of the table."""
    return checked_rows_of(pd.read_parquet(table))


def checked_rows_of(frame: pd.DataFrame) -> list[tuple]:
    return sorted(
        [
            (
                present(row.device),
                row.at.to_pydatetime(),
                present(row.temperature_c),
                present(row.rejection_reason),
            )
            for row in frame.itertuples()
        ],
        key=str,
    )


def present(value):
    """pandas' missing value (None or NaN, by dtype) as None."""
    return None if pd.isna(value) else value


def project_files(project: Path) -> dict[str, str]:
    """Each file of the project but its data and caches, with its digest."""
    return {
        str(path.relative_to(project)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(project.rglob("*"))
        if path.is_file()
        # kedro-viz records each run's events in .viz/.
        and not {"data", "__pycache__", ".ruff_cache", ".viz"} & set(path.parts)
        and ".egg-info" not in str(path)
    }


# The previous release of the plugin, as a user's project has it in its
# wheels/ (tests/releases/README.md says which, and how it was built).
PREVIOUS_RELEASE = sorted(
    (STARTER_ROOT / "tests/releases").glob("kedro_streaming-*.whl"),
    key=lambda wheel: [int(n) for n in wheel.name.split("-")[1].split(".")],
)[-1]


def installed_plugin(project_bin: Path, cwd: Path) -> str:
    """The version of kedro-streaming installed in the virtualenv."""
    version = run(
        [
            project_bin / "python",
            "-c",
            "import kedro_streaming as k; print(k.__version__)",
        ],
        cwd=cwd,
    )
    return version.stdout.strip()


def test_without_the_example_a_small_project_runs_tests_and_upgrades(
    sensor_project, project_bin, tmp_path
):
    """`example: none`: one records pipeline, its own test, a bounded run
    whose every row is computed here, made by the plugin's previous release;
    then this version, installed over it as docs/upgrading.md says, runs the
    same project from its checkpoint, reads that release's progress log and
    passes the project's tests, with no file of the project changed."""
    # Its own virtualenv, as the session's: the upgrade below must not change
    # the plugin under the tests running beside it.
    project_bin = venv_like(project_bin, tmp_path / "venv")
    project = tmp_path / "sensor-lab"
    shutil.copytree(sensor_project, project)
    package = project / "src" / PACKAGE
    assert sorted(p.name for p in (package / "pipelines").iterdir()) == [
        "__init__.py",
        "records",
    ]
    assert not (project / "tools").exists() and not (project / ".starter").exists()
    lines = sum(len(p.read_text().splitlines()) for p in package.rglob("*.py"))
    print(f"example none: {lines} lines in src/")

    assert_tidy_home(project, project_bin)

    # The previous release first, as a project made a month ago has it.
    pip = [project_bin / "python", "-m", "pip", "install", "-q"]
    run([*pip, "--no-deps", PREVIOUS_RELEASE], cwd=project, timeout=300)
    previous = PREVIOUS_RELEASE.name.split("-")[1]
    assert installed_plugin(project_bin, project) == previous != PLUGIN_VERSION
    kedro = project_bin / "kedro"
    validated = run([kedro, "streams", "validate"], cwd=project)
    assert "query checked_records: ok" in validated.stdout
    assert "query quarantined_records: ok" in validated.stdout
    run([kedro, "run", *AS_SHIPPED], cwd=project)
    landing = project / "data/01_raw/records_landing"
    shipped = (landing / "records-0000.json").read_text().splitlines()
    table = project / "data/02_intermediate/checked_records"
    assert checked_rows(table) == expected_checked(shipped)
    quarantine = project / "data/02_intermediate/quarantined_records"
    assert checked_rows(quarantine) == rejected(expected_checked(shipped))
    assert rejected(expected_checked(shipped))  # the shipped file has some

    # This version over it, from the project's wheels/ (docs/upgrading.md).
    before = project_files(project)
    run([*pip, "--disable-pip-version-check", "-r", "requirements.txt"], cwd=project)
    assert installed_plugin(project_bin, project) == PLUGIN_VERSION
    more = [
        json.dumps(
            {"device": "boiler-1", "at": "2026-11-26T11:00:00Z", "temperature_c": t}
        )
        for t in (50.5, 70.0)
    ]
    (landing / "records-0001.json").write_text("\n".join(more) + "\n")
    run([kedro, "run", *AS_SHIPPED], cwd=project)
    assert checked_rows(table) == expected_checked(shipped + more)
    assert checked_rows(quarantine) == rejected(expected_checked(shipped + more))
    # Both releases' progress logs, read as one: every batch, every row.
    status = run([kedro, "streams", "status"], cwd=project).stdout
    written = len(expected_checked(shipped + more)) - len(
        rejected(expected_checked(shipped + more))
    )
    assert "checked_records: batch 1 committed" in status
    assert f"{written} rows written in 2 batches" in status
    # docs/stateful.md's recipes are the same page in both kinds of
    # project: they run in the taxi project's tests (test_starter.py);
    # the recipes of this project's own pages run here.
    own = run(
        [
            *(
                project_bin / "python",
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
            ),
            *("--deselect", "tests/test_docs.py::test_stateful_recipe"),
        ],
        cwd=project,
        env=SHIPPED_JIT,
    )
    assert " passed" in own.stdout and "failed" not in own.stdout
    (landing / "records-0001.json").unlink()
    # Not a file of the project changed (runs may add logs, not change files).
    after = project_files(project)
    assert {path: after.get(path) for path in before} == before


# A block of the walkthrough whose first line names the file it is.


def test_the_walkthrough_runs_as_written_and_its_alerts_are_right(
    sensor_project, project_bin, broker, tmp_path
):
    """docs/your-own-stream.md: every file it shows is written, every command
    it shows is run (the broker is the session's), and the alerts topic holds
    the alerts computed here from the readings it sends."""
    env = {"PATH": f"{project_bin}:{quiet_env()['PATH']}"}
    outputs = []

    def run_block(block: str) -> None:
        if "broker start" in block:
            return  # the session's broker stands in for it
        outputs.append(
            run(
                ["bash", "-e", "-c", block],
                cwd=tmp_path / "sensor-lab",
                env=env,
                timeout=600,
            )
        )

    project = walkthrough_project(
        sensor_project, tmp_path, broker.bootstrap_servers, commands=run_block
    )
    run([project_bin / "ruff", "format", "--check", "."], cwd=project)
    run([project_bin / "ruff", "check", "."], cwd=project)

    readings = (project / "readings.jsonl").read_text().splitlines()
    table = project / "data/kafka/02_intermediate/checked_records"
    assert checked_rows(table) == expected_checked(readings)
    quarantine = project / "data/kafka/02_intermediate/quarantined_records"
    assert checked_rows(quarantine) == rejected(expected_checked(readings))
    assert [reason for *_, reason in checked_rows(quarantine)] == [
        "invalid temperature_c"  # the page names it
    ]
    # `kedro streams watch` prints "key<TAB>value" per message; the block's
    # runs log to stdout too, in lines without a tab.
    watched = [line for line in outputs[-1].stdout.splitlines() if "\t" in line]
    alerts = [json.loads(line.split("\t", 1)[1]) for line in watched]
    assert [line.split("\t")[0] for line in watched] == [a["device"] for a in alerts]
    assert alerts == expected_alerts(
        readings,
        yaml.safe_load((project / "conf/base/parameters_alerts.yml").read_text())[
            "alerts"
        ],
    )
    assert len(alerts) == 1  # the page says so


def expected_alerts(lines: list[str], settings: dict) -> list[dict]:
    """The closed 1-minute windows whose average is above the limit, after one
    micro-batch of every checked reading (as a bounded run reads them)."""
    valid = [
        (device, at, temperature)
        for device, at, temperature, reason in expected_checked(lines)
        if reason is None
    ]
    assert settings["window_duration"] == "1 minute"
    delay = timedelta(seconds=int(settings["watermark_delay"].split()[0]))
    watermark = max(at for _, at, _ in valid) - delay
    windows: dict[tuple, list[float]] = {}
    for device, at, temperature in valid:
        start = at.replace(second=0, microsecond=0)
        windows.setdefault((device, start), []).append(temperature)
    return [
        {
            "device": device,
            "window_start": f"{start:%Y-%m-%dT%H:%M:%S}.000Z",
            "window_end": f"{start + timedelta(minutes=1):%Y-%m-%dT%H:%M:%S}.000Z",
            "readings": len(values),
            "avg_temperature_c": sum(values) / len(values),
        }
        for (device, start), values in sorted(windows.items())
        if start + timedelta(minutes=1) <= watermark
        and sum(values) / len(values) > settings["max_avg_temperature_c"]
    ]


# A step of the plugin README's "existing project" section: a file, whole or
# to add to, indented as a list item's block is.
README_BLOCK = re.compile(
    r"^( *)```(?:python|yaml)\n\1# (\S+)( \(add\))?\n(.*?)^\1```",
    re.DOTALL | re.MULTILINE,
)


def test_streaming_added_to_a_project_of_kedros_own_template(project_bin, tmp_path):
    """The plugin README's steps, done as written in a project that
    `kedro new` made from Kedro's own template: a bounded stream runs, every
    record checked and written once."""
    kedro = project_bin / "kedro"
    new = ["new", "--name", "Plain Lab", "--tools", "none", "--example", "no"]
    run([kedro, *new, "--telemetry", "no"], cwd=tmp_path)
    project = tmp_path / "plain-lab"
    readme = (PLUGIN_ROOT / "README.md").read_text()
    section = readme[
        readme.index("## Streaming in an existing") : readme.index("## Versions")
    ]
    steps = README_BLOCK.findall(section)
    assert [path for _, path, _, _ in steps] == [
        "src/<package>/settings.py",
        "conf/base/spark.yml",
        "conf/base/catalog.yml",
        "src/<package>/pipelines/readings/pipeline.py",
        "src/<package>/pipelines/readings/__init__.py",
    ]
    for _indent, path, add, body in steps:
        target = project / path.replace("<package>", "plain_lab")
        text = textwrap.dedent(body)
        target.parent.mkdir(parents=True, exist_ok=True)
        existing = target.read_text() if add and target.exists() else ""
        target.write_text(existing + "\n" + text)

    readings = [
        json.dumps(
            {"device": "d1", "at": "2026-11-26T10:00:00Z", "temperature_c": 21.5}
        ),
        json.dumps({"device": "d1", "at": "2026-11-26T10:01:00Z", "temperature_c": 75}),
        json.dumps({"at": "2026-11-26T10:02:00Z", "temperature_c": 20.0}),
    ]
    landing = project / "data/01_raw/readings"
    landing.mkdir(parents=True)
    (landing / "readings-1.json").write_text("\n".join([*readings, "not json"]) + "\n")
    # No streaming.yml: `--params trigger=available_now` still bounds the run.
    ran = run([kedro, "run", *AS_SHIPPED], cwd=project, timeout=300)
    ended = (
        "Query checked_readings ended: 1 batches, 4 rows in, 4 written, 3 quarantined"
    )
    assert ended in ran.output

    frame = pd.read_parquet(project / "data/02_intermediate/checked_readings")
    # The rule is `temperature_c < 60`: the largest number below 60 passes.
    below_60 = (-math.inf, math.nextafter(60, 0))
    parsed = frame[frame.rejection_reason != "not a valid record"]
    assert checked_rows_of(parsed) == expected_checked(readings, "plausible", below_60)
    assert (frame.rejection_reason == "not a valid record").sum() == 1
