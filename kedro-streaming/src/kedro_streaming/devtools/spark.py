"""A Spark standalone cluster and a Spark Connect server on this machine
(``kedro streams cluster|connect start|status|stop``): the installed PySpark's
own Spark, detached, with their state in ``data/spark/``. Workers start
without this shell's ``PYTHONPATH``, as on other machines."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import urllib.request
from pathlib import Path

import pyspark

from kedro_streaming.devtools.processes import (
    HOST,
    ProcessError,
    free_ports,
    processes_alive,
    processes_status,
    read_state,
    stop_processes,
    wait_until_ready,
    write_state,
)

SPARK_HOME = Path(pyspark.__file__).parent
DATA_DIR = Path("data/spark")
CLUSTER_STATE = "cluster.json"
CONNECT_STATE = "connect.json"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# Settings of spark.yml that a client chooses, not a server.
CLIENT_SETTINGS = ("spark.master", "spark.remote", "spark.app.name")


class SparkToolError(ProcessError):
    """A cluster or server that does not start, or is not ours."""


def start_cluster(
    data_dir: Path,
    *,
    port: int = 7077,
    workers: int = 1,
    cores: int = 2,
    memory: str = "4g",
    timeout: float = 90,
) -> dict:
    """Starts a master and ``workers`` workers, detached, and waits for them;
    returns the cluster's state (``master_url``, ``ui_url``, pids and logs)."""
    state = read_state(data_dir, CLUSTER_STATE)
    if state and processes_alive(state):
        return state
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    ui_port, *worker_ui_ports = free_ports(1 + workers)
    master_url = f"spark://{HOST}:{port}"
    state = {
        "master_url": master_url,
        "ui_url": f"http://{HOST}:{ui_port}",
        "processes": [],
    }
    master = _spawn(
        ["--host", HOST, "--port", str(port), "--webui-port", str(ui_port)],
        MASTER_CLASS,
        data_dir / "master.log",
        cwd=data_dir,
    )
    state["processes"].append(master)
    try:
        wait_until_ready(lambda: _master_json(state) is not None, timeout, master)
        for index, worker_ui in enumerate(worker_ui_ports):
            work_dir = data_dir / f"worker-{index}"
            work_dir.mkdir(exist_ok=True)
            state["processes"].append(
                _spawn(
                    [
                        *("--host", HOST, "--cores", str(cores), "--memory", memory),
                        *("--work-dir", str(work_dir), "--webui-port", str(worker_ui)),
                        master_url,
                    ],
                    WORKER_CLASS,
                    data_dir / f"worker-{index}.log",
                    cwd=work_dir,
                    without_pythonpath=True,
                )
            )
        wait_until_ready(
            lambda: (_master_json(state) or {}).get("aliveworkers") == workers,
            timeout,
            state["processes"][-1],
        )
    except BaseException:
        stop_processes(state)
        raise
    write_state(data_dir, CLUSTER_STATE, state)
    return state


def start_connect(
    data_dir: Path,
    settings: dict[str, str],
    *,
    port: int = 15002,
    master: str = "local[2]",
    timeout: float = 180,
) -> dict:
    """Starts a Spark Connect server, detached, with ``spark.yml``'s settings
    but those a client chooses; ``timeout`` includes the packages' download."""
    state = read_state(data_dir, CONNECT_STATE)
    if state and processes_alive(state):
        return state
    data_dir = data_dir.resolve()
    work_dir = data_dir / "connect"
    work_dir.mkdir(parents=True, exist_ok=True)
    conf = {k: v for k, v in settings.items() if k not in CLIENT_SETTINGS}
    conf["spark.connect.grpc.binding.address"] = HOST
    conf["spark.connect.grpc.binding.port"] = str(port)
    arguments = ["--class", CONNECT_CLASS, "--name", "Spark Connect server"]
    arguments += ["--master", master]
    for key, value in sorted(conf.items()):
        arguments += ["--conf", f"{key}={value}"]
    server = _spawn(
        arguments, None, data_dir / "connect.log", cwd=work_dir, script="spark-submit"
    )
    state = {"remote": f"sc://{HOST}:{port}", "master": master, "processes": [server]}
    try:
        wait_until_ready(lambda: _accepts(port), timeout, server)
    except BaseException:
        stop_processes(state)
        raise
    write_state(data_dir, CONNECT_STATE, state)
    return state


def status(data_dir: Path, state_file: str) -> dict:
    """The recorded state, with ``running``; a cluster's also with its workers."""
    result = processes_status(data_dir, state_file)
    if result["running"] and "ui_url" in result:
        master = _master_json(result) or {}
        result["alive_workers"] = master.get("aliveworkers", 0)
        result["applications"] = [
            {"id": app["id"], "name": app["name"], "cores": app.get("cores")}
            for app in master.get("activeapps", []) + master.get("completedapps", [])
        ]
    return result


def _spawn(
    arguments: list[str],
    main_class: str | None,
    log: Path,
    *,
    cwd: Path,
    without_pythonpath: bool = False,
    script: str = "spark-class",
) -> dict:
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME)}
    if without_pythonpath:
        env.pop("PYTHONPATH", None)
    command = [str(SPARK_HOME / "bin" / script)]
    command += [main_class, *arguments] if main_class else arguments
    with open(log, "ab") as output:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C in this shell does not reach it
        )
    # spark-class ends in `exec java`: this pid becomes the JVM's.
    return {"pid": process.pid, "log": str(log), "marker": main_class or CONNECT_CLASS}


def _master_json(state: dict) -> dict | None:
    try:
        with urllib.request.urlopen(f"{state['ui_url']}/json/", timeout=2) as page:
            return json.load(page)
    except (OSError, ValueError):
        return None


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return True
    except OSError:
        return False
