"""Fixtures: a project generated with `kedro new --starter`, and its own venv."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import time
import uuid
import venv
from pathlib import Path

import pytest

STARTER_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(
    os.environ.get("STARTER_REFERENCE_DATA", STARTER_ROOT.parent / "shared" / "reference-data")
)
PROJECT_NAME = "Taxi Rides"
PACKAGE = "taxi_rides"
# The SASL/PLAIN user of the test broker; tests check the password is never printed.
SASL_USER, SASL_PASSWORD = "taxi-app", f"pw-{uuid.uuid4().hex}"


def quiet_env(**extra: str) -> dict[str, str]:
    # A wide console, so that Kedro's rich log lines are not wrapped.
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1", "COLUMNS": "250"}
    env.pop("PYTHONPATH", None)
    return {**env, **extra}


def run(command: list, cwd: Path, timeout: float = 600, check: bool = True,
        env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
    """Runs a command; unless ``check`` is false, fails the test when it fails.

    The result also has ``seconds`` (wall time) and ``output`` (stdout + stderr).
    """
    started = time.monotonic()
    result = subprocess.run(
        command, cwd=cwd, env=quiet_env(**(env or {})), capture_output=True, text=True,
        timeout=timeout, **kwargs
    )
    result.seconds = time.monotonic() - started
    result.output = result.stdout + result.stderr
    if check and result.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, command))} exited {result.returncode} in {cwd}\n"
            f"--- stdout ---\n{result.stdout[-8000:]}\n--- stderr ---\n{result.stderr[-8000:]}"
        )
    return result


@pytest.fixture(scope="session")
def generated_project(tmp_path_factory) -> Path:
    """A pristine project, as `kedro new --starter=<this repo> --config` makes it."""
    workdir = tmp_path_factory.mktemp("generated")
    config = workdir / "config.yml"
    config.write_text(f"project_name: {PROJECT_NAME}\noutput_dir: {workdir}\n")
    run(
        [sys.executable, "-m", "kedro", "new", "--starter", str(STARTER_ROOT),
         "--config", str(config), "--telemetry", "no"],
        cwd=workdir,
    )
    return workdir / "taxi-rides"


@pytest.fixture(scope="session")
def project_bin(generated_project, tmp_path_factory) -> Path:
    """The bin/ folder of a fresh virtualenv with the project's requirements."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    run([bin_dir / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "-r", "requirements.txt"], cwd=generated_project, timeout=1500)
    # Editable, as the README says, so `python -m <package>.<command>` works; the
    # copies the tests run in hold the same code and read their own conf/ and data/.
    run([bin_dir / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "--no-deps", "-e", "."], cwd=generated_project, timeout=600)
    return bin_dir


@pytest.fixture
def fresh_project(generated_project, tmp_path) -> Path:
    """A copy of the generated project with no run behind it."""
    copy = tmp_path / generated_project.name
    shutil.copytree(generated_project, copy)  # keeps file times, so file order
    return copy


@pytest.fixture(scope="session")
def project_module(generated_project):
    """Imports a module of the generated project's package, e.g. ``kafka_local``."""
    sys.path.insert(0, str(generated_project / "src"))
    try:
        yield lambda name: importlib.import_module(f"{PACKAGE}.{name}")
    finally:
        sys.path.remove(str(generated_project / "src"))


@pytest.fixture(scope="session")
def kafka_local(project_module):
    return project_module("kafka_local")


@pytest.fixture(scope="session")
def broker(kafka_local):
    """One real broker for the session, with a PLAINTEXT and a SASL_PLAINTEXT listener."""
    started = time.monotonic()
    instance = kafka_local.LocalKafka(sasl_users={SASL_USER: SASL_PASSWORD})
    try:
        instance.start(timeout=180)
        print(f"broker ready in {time.monotonic() - started:.1f} s")  # noqa: T201
        yield instance
    finally:
        instance.stop()


@pytest.fixture
def broker_log_on_failure(broker, request):
    failed = request.session.testsfailed
    yield broker
    if request.session.testsfailed > failed:
        print(f"\n--- broker log ({broker.log_path}) ---\n{broker.log_tail(80)}")  # noqa: T201
