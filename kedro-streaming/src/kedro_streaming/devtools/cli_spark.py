"""``cluster``, ``connect`` and ``submit``: a Spark standalone cluster, a
Spark Connect server, and spark-submit of the packaged project."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import click

import kedro_streaming
from kedro_streaming._project import project_config
from kedro_streaming.devtools import spark
from kedro_streaming.devtools.cli_base import (
    ServiceCommand,
    ServiceGroup,
    add_stop_and_status,
    data_dir_option,
)
from kedro_streaming.devtools.processes import say

with_data_dir = data_dir_option(spark.DATA_DIR)


@click.group("cluster", cls=ServiceGroup)
def cluster_group() -> None:
    """A local Spark standalone cluster: a master and workers."""


@cluster_group.command("start")
@click.option("--port", type=int, default=7077, help="the master's port")
@click.option("--workers", type=int, default=1, help="how many (default 1)")
@click.option("--cores", type=int, default=2, help="cores per worker")
@click.option("--memory", default="4g", help="memory per worker")
@click.option("--timeout", type=float, default=90, help="seconds to start")
@with_data_dir
def start_cluster(
    *,  # click passes the options by name
    port: int,
    workers: int,
    cores: int,
    memory: str,
    timeout: float,
    data_dir: Path,
) -> int:
    """Start a master and workers, detached."""
    state = spark.start_cluster(
        data_dir,
        port=port,
        workers=workers,
        cores=cores,
        memory=memory,
        timeout=timeout,
    )
    say(
        f"Spark standalone cluster: {workers} worker(s), web UI {state['ui_url']}",
        file=sys.stderr,
    )
    say(state["master_url"])
    return 0


@click.group("connect", cls=ServiceGroup)
def connect_group() -> None:
    """A local Spark Connect server."""


@connect_group.command("start")
@click.option("--port", type=int, default=15002, help="its gRPC port")
@click.option("--master", help="where it runs queries (default: spark.master of --env)")
@click.option("--env", default="local", help="conf/<env> whose spark.yml sets it up")
@click.option("--timeout", type=float, default=180, help="seconds to start")
@with_data_dir
def start_connect(
    port: int, master: str | None, env: str, timeout: float, data_dir: Path
) -> int:
    """Start it, detached; wait until ready."""
    settings = spark_settings(env)
    master = master or settings.get("spark.master", "local[2]")
    state = spark.start_connect(
        data_dir, settings, port=port, master=master, timeout=timeout
    )
    say(f"Spark Connect server on {master}, log {data_dir}", file=sys.stderr)
    say(state["remote"])
    return 0


add_stop_and_status(cluster_group, with_data_dir, spark.CLUSTER_STATE, "cluster")
add_stop_and_status(connect_group, with_data_dir, spark.CONNECT_STATE, "server")


@click.command(
    cls=ServiceCommand,
    context_settings={"ignore_unknown_options": True},
)
@click.option("--env", default="cluster", help="conf/<env> (default cluster)")
@click.option("--dry-run", is_flag=True, help="print the command, do not run it")
@click.argument("kedro_args", nargs=-1, type=click.UNPROCESSED)
def submit(env: str, dry_run: bool, kedro_args: tuple[str, ...]) -> int:
    """spark-submit the packaged project (`kedro package` first).

    KEDRO_ARGS, after `--`, go to `kedro run` as they are.
    """
    command, variables = submit_command(env, list(kedro_args))
    say(shlex.join(command), file=sys.stderr)
    return 0 if dry_run else subprocess.call(command, env=variables)


def spark_settings(env: str) -> dict[str, str]:
    """``conf/<env>``'s spark.yml, as Spark takes settings: text."""
    spark_yml = project_config(env)["spark"]
    return {key: str(value) for key, value in spark_yml.items() if value is not None}


def submit_command(env: str, kedro_args: list[str]) -> tuple[list[str], dict]:
    """spark-submit of the packaged project (``kedro package``) with ``conf/<env>``.

    Spark's settings come from the environment's spark.yml, written as a
    properties file: spark-submit starts the JVM, so it must resolve the Kafka
    connector (``spark.jars.packages``) itself.
    """
    package = project_config(env)["package_name"]
    dist = Path("dist")
    wheels = sorted(dist.glob(f"{package}-*.whl"))
    conf_archive = dist / f"conf-{package}.tar.gz"
    if not wheels or not conf_archive.is_file():
        raise ValueError("dist/ holds no packaged project: run `kedro package` first")
    settings = spark_settings(env)
    if settings.get("spark.remote"):
        raise ValueError(
            f"conf/{env} uses Spark Connect (spark.remote): run it with "
            f"`kedro run --env {env}`; spark-submit needs a spark.master"
        )
    properties = dist / f"spark-{env}.conf"
    properties.write_text(
        "".join(  # a Java properties file: backslashes are escapes
            f"{key} {value.replace(chr(92), chr(92) * 2)}\n"
            for key, value in sorted(settings.items())
        )
    )
    # The runtime goes with the project: executors import it to run what the
    # project's nodes hand them (a foreachBatch function, a UDF).
    runtime = _runtime_archive(dist)
    entry_point = dist / "kedro_run.py"
    entry_point.write_text(ENTRY_POINT.format(package=package))
    command = [
        str(spark.SPARK_HOME / "bin" / "spark-submit"),
        *("--properties-file", str(properties)),
        *("--py-files", f"{wheels[-1]},{runtime}"),
        str(entry_point),
        *("--env", env, "--conf-source", str(conf_archive)),
        *kedro_args,
    ]
    # The driver needs the project's dependencies: by default, this Python's.
    python = {
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "PYSPARK_DRIVER_PYTHON": os.environ.get(
            "PYSPARK_DRIVER_PYTHON", sys.executable
        ),
    }
    return command, {**os.environ, **python}


def _runtime_archive(dist: Path) -> Path:
    """The installed kedro_streaming package as a zip for ``--py-files``."""
    package = Path(kedro_streaming.__file__).parent
    base = dist / f"kedro_streaming-{kedro_streaming.__version__}"
    archive = shutil.make_archive(
        str(base), "zip", root_dir=package.parent, base_dir=package.name
    )
    return Path(archive)


ENTRY_POINT = '''"""spark-submit's entry point: runs the packaged project as `kedro run` would."""

import sys

from {package}.__main__ import main

main(sys.argv[1:])
'''
