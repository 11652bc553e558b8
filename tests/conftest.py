"""Fixtures: a project generated with `kedro new --starter`, and its own venv.

What the tests share besides fixtures is in the `support` package.

Ports: every port a test uses is chosen free when it runs (`free_port()`),
so that two test sessions, or a session beside a user's own broker,
registry or run, share one machine. Each `kedro run` the tests start gets
free ones from the environment: `KEDRO_STREAMS_METRICS_PORT` and
`KEDRO_STREAMS_SPARK_UI_PORT` (`support.common.quiet_env`; conf/base/streaming.yml
reads them when `--params` sets no `metrics_port` or `spark_ui_port`).
To prove it, the session's own process (xdist's controller) holds the default ports (`DEFAULT_PORTS` of
`kedro_streaming.devtools.processes`: Kafka's 9092-9095, metrics 9464,
Spark UI 4040, registry 8081, Spark's 7077 and 15002) bound and listening
throughout, those of them free when it starts: a test that takes one fails.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

import pytest

# `support` holds the shared assertions (`assert_matches_reference`, ...):
# rewritten by pytest, their failures show the values compared.
pytest.register_assert_rewrite("support")

from support.common import (  # noqa: E402
    EVENT_HUBS_PASSWORD,
    EVENT_HUBS_USER,
    PACKAGE,
    PLUGIN_SOURCE,
    SASL_PASSWORD,
    SASL_USER,
    free_port,
    run,
    tool_service,
)
from support.project import (  # noqa: E402
    PREFETCHES,
    USER_FOLDER,
    generate_away,
    generate_project,
    install_project,
    project_pyspark,
    pyspark_wheel,
    resolve_spark_packages,
    start_prefetches,
)
from support.security import bad_certificates  # noqa: E402

_HOLDING = contextlib.ExitStack()

# PySpark's wheels, kept between sessions: one per Spark line, 0.45 GB each
# (support.project.pyspark_wheel says why).
WHEELS = Path.home() / ".cache" / "kedro-streaming-starter-tests" / "wheels"

# Whether this process is one of xdist's workers (tests/README.md), which
# share the session's project and virtualenv.
XDIST_WORKER = "PYTEST_XDIST_WORKER" in os.environ


def pytest_sessionstart(session):
    if not XDIST_WORKER:
        # The session's own process (xdist's controller, which outlives its
        # workers) holds the default ports that are free for the whole run:
        # see this module's docstring.
        sys.path.insert(0, str(PLUGIN_SOURCE))
        try:
            processes = importlib.import_module("kedro_streaming.devtools.processes")
        finally:
            sys.path.remove(str(PLUGIN_SOURCE))
        _HOLDING.enter_context(processes.hold_ports(processes.DEFAULT_PORTS))
    # Where the tests run (each fetch takes a file lock): not in xdist's
    # controller, which runs none.
    if XDIST_WORKER or not getattr(session.config.option, "numprocesses", None):
        # Spark's scratch folders (each JVM's copy of its jars, its state
        # stores' local files) in one folder gone with the session: a run
        # killed with SIGKILL, as the tests do, leaves its own behind.
        scratch = Path(tempfile.mkdtemp(prefix="starter-tests-spark-"))
        _HOLDING.callback(shutil.rmtree, scratch, ignore_errors=True)
        os.environ["SPARK_LOCAL_DIRS"] = str(scratch)
        start_prefetches(WHEELS)


def pytest_sessionfinish(session):
    _HOLDING.close()


# The test files in the order two xdist workers take them (tests/README.md),
# each a whole file, longest first (their time one at a time, in minutes), so
# that neither worker is left with a long file at the end. The other Spark
# line first: it makes its own virtualenv, while the other worker makes the
# session's.
LONGEST_FIRST = (
    "test_spark_lines.py",  # 6.5
    "test_plugin.py",  # 11, the plugin's own suite
    "test_guarantees.py",  # 7.5
    "test_avro.py",  # 6.5, the session's broker and registry started
    "test_starter.py",  # 6
    "test_cluster.py",  # 5.5
    "test_streams.py",  # 4
    "test_kafka.py",  # 4
    "test_delta.py",  # 4.5, the zone tables kept from their changes too
    "test_cdc.py",  # 1.5
    "test_mistakes.py",  # 3
    "test_own_stream.py",  # 3
    "test_realtime.py",  # 2.5
    "test_monitoring.py",  # 2
    "test_security.py",  # 0.5
)


def _machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy since it started (all
    cores; /proc/stat's jiffies other than idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item):
    """With STARTER_TESTS_COMMAND_LOG set, a line per test too: its wall time
    and the CPU seconds the machine spent meanwhile (the test's own CPU when
    one test runs at a time on an otherwise quiet machine)."""
    path = os.environ.get("STARTER_TESTS_COMMAND_LOG")
    if not path:
        yield
        return
    began, busy = time.monotonic(), _machine_busy_seconds()
    yield
    wall, cpu = time.monotonic() - began, _machine_busy_seconds() - busy
    with open(path, "a") as log:
        log.write(f"{item.nodeid}\t{wall:.1f}\tTEST cpu {cpu:.1f}\n")


def pytest_collection_modifyitems(items):
    if not XDIST_WORKER:  # one file at a time: as written
        return
    rank = {name: number for number, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def shared_by_workers(name: str, tmp_path_factory, make) -> Path:
    """``make(folder)``'s result, made once for the session: under xdist, by
    the first worker that asks (the others wait for it, then share it)."""
    if not XDIST_WORKER:
        return make(tmp_path_factory.mktemp(name))
    root = tmp_path_factory.getbasetemp().parent  # the session's, not the worker's
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        made = root / f"{name}.made"
        if made.exists():
            return Path(made.read_text())
        (root / name).mkdir()
        result = make(root / name)
        made.write_text(str(result))
        return result


@pytest.fixture(scope="session")
def generated_project(tmp_path_factory) -> Path:
    """A pristine project, as `kedro new --starter=<a clone> --config` makes it
    (the default Spark line), moved away from the clone, which is gone:
    `project_bin` installs it as a teammate or a CI runner would."""
    return shared_by_workers("generated", tmp_path_factory, generate_away)


@pytest.fixture(scope="session")
def project_bin(generated_project, tmp_path_factory) -> Path:
    """The bin/ folder of a fresh virtualenv with the project and its dev extra.

    STARTER_PROJECT_VENV names one made earlier instead, to iterate quickly.
    """
    if os.environ.get("STARTER_PROJECT_VENV"):
        return Path(os.environ["STARTER_PROJECT_VENV"]) / "bin"

    def install(folder: Path) -> Path:
        pyspark_wheel(WHEELS, project_pyspark(generated_project))
        bin_dir = install_project(generated_project, folder, find_links=[WHEELS])
        if XDIST_WORKER:
            resolve_spark_packages(generated_project, bin_dir)
        return bin_dir

    return shared_by_workers("venv", tmp_path_factory, install)


@pytest.fixture(scope="session")
def deps_python(project_bin, tmp_path_factory) -> Path:
    """A Python with the project's dependencies but not the project itself.

    Its site-packages points at the project venv's, whose `.pth` files (the
    editable install of the project among them) it does not run: code that
    imports the project under it got the package from Spark, as on a cluster.
    """
    env_dir = tmp_path_factory.mktemp("deps-only")
    venv.create(env_dir, with_pip=False)
    site = next((project_bin.parent / "lib").glob("python3*/site-packages"))
    own_site = next((env_dir / "lib").glob("python3*/site-packages"))
    (own_site / "project-dependencies.pth").write_text(f"{site}\n")
    python = env_dir / "bin" / "python"
    probe = run(
        [python, "-c", f"import kedro, pyspark; import {PACKAGE}"],
        cwd=env_dir,
        check=False,
    )
    assert "No module named" in probe.output and PACKAGE in probe.output, probe.output
    return python


@pytest.fixture(scope="session")
def spark_cluster(generated_project, project_bin, tmp_path_factory):
    """A real Spark standalone cluster (a master and a worker, separate JVMs)
    for the session, started with the project's own tool."""
    data_dir = tmp_path_factory.mktemp("spark-cluster")
    with tool_service(
        "cluster", generated_project, project_bin, data_dir, "--memory", "3g"
    ) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def connect_server(generated_project, project_bin, tmp_path_factory):
    """A real Spark Connect server for the session (local[2]), set up from the
    project's spark.yml by its own tool."""
    data_dir = tmp_path_factory.mktemp("spark-connect")
    with tool_service("connect", generated_project, project_bin, data_dir) as server:
        yield server


@pytest.fixture
def fresh_project(generated_project, tmp_path) -> Path:
    """A copy of the generated project with no run behind it."""
    copy = tmp_path / USER_FOLDER / generated_project.name
    shutil.copytree(generated_project, copy)  # keeps file times, so file order
    return copy


def modules_below(folder: Path, package: str):
    """Yields an importer of ``package``'s modules, with ``folder`` on the path."""
    sys.path.insert(0, str(folder))
    try:
        yield lambda name: importlib.import_module(f"{package}.{name}")
    finally:
        sys.path.remove(str(folder))


@pytest.fixture(scope="session")
def project_tool(generated_project):
    """Imports a module of the generated project's `tools`: ``trips``."""
    yield from modules_below(generated_project, "tools")


@pytest.fixture(scope="session")
def plugin_tool():
    """Imports a module of the plugin's development tools (``broker``,
    ``kafka``) from this repository's source: they need Kafka's client only,
    not the PySpark of a project's venv."""
    yield from modules_below(PLUGIN_SOURCE, "kedro_streaming.devtools")


@pytest.fixture(scope="session")
def sensor_project(tmp_path_factory, project_bin) -> Path:
    """`kedro new --config` with `example: none` (the name of a user's own
    stream), installed into the default project's virtualenv without
    dependencies: they are the same."""

    def make(folder: Path) -> Path:
        # Once per session: its editable install is the shared venv's.
        home = folder / USER_FOLDER
        home.mkdir(parents=True)
        project = generate_project(home, project_name="Sensor Lab", example="none")
        pip = [project_bin / "python", "-m", "pip", "install", "-q", "--no-deps"]
        run([*pip, "-e", project], cwd=project, timeout=300)
        return project

    return shared_by_workers("none", tmp_path_factory, make)


@pytest.fixture(scope="session")
def broker_tool(plugin_tool):
    return plugin_tool("broker")


@pytest.fixture(scope="session")
def broker(broker_tool, plugin_tool, tmp_path_factory):
    """One real broker for the session: PLAINTEXT and SASL_PLAINTEXT listeners,
    the TLS ones (SSL, MTLS, SASL_SSL with PLAIN and SCRAM-SHA-512), and SSL
    listeners whose certificates are wrong in one way each (BAD_CERTIFICATES)."""
    started = time.monotonic()
    tls_dir = tmp_path_factory.mktemp("tls")
    plugin_tool("certificates").ensure_tls_files(tls_dir)
    instance = broker_tool.LocalKafka(
        sasl_users={SASL_USER: SASL_PASSWORD, EVENT_HUBS_USER: EVENT_HUBS_PASSWORD},
        tls=True,
        tls_dir=tls_dir,
        extra_tls_listeners=bad_certificates(plugin_tool("certificates"), tls_dir),
        # ACLs, as production has them: everything is allowed to everyone
        # unless an ACL names it (test_security denies a topic to a user).
        extra_properties={
            "authorizer.class.name": (
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
            ),
            "allow.everyone.if.no.acl.found": "true",
            "super.users": "User:ANONYMOUS",
        },
    )
    try:
        instance.start(timeout=180)
        print(f"broker ready in {time.monotonic() - started:.1f} s")
        yield instance
    finally:
        instance.stop()


@pytest.fixture(scope="session")
def schema_registry(plugin_tool, tmp_path_factory):
    """One real schema registry for the session (Apicurio Registry, from Maven
    Central, as `kedro streams registry start` runs it): its state, ``url``
    (Confluent's API) and ``data`` (its schemas' folder) among it."""
    registry = plugin_tool("registry")
    if "registry" in PREFETCHES:
        PREFETCHES["registry"].join()
    data = tmp_path_factory.mktemp("schema-registry")
    started = time.monotonic()
    state = registry.start(data, plugin_tool("processes").free_ports(1)[0])
    print(f"schema registry ready in {time.monotonic() - started:.1f} s")
    try:
        yield state
    finally:
        plugin_tool("processes").stop_recorded(data, registry.STATE_FILE)


# A login for the registry behind nginx: a password no URL, header or log
# may show, with characters that need care in each.
REGISTRY_USER = "schema-alice"
REGISTRY_PASSWORD = 'p@ss "w0rd";\\ ü/#?'


@pytest.fixture
def registry_login(schema_registry, tmp_path):
    """The session's registry behind nginx asking for HTTP basic
    authentication, as a company's registry does: ``url``, ``username``,
    ``password``."""
    (tmp_path / "users").write_text(f"{REGISTRY_USER}:{{PLAIN}}{REGISTRY_PASSWORD}\n")
    login = f"auth_basic registry;\n      auth_basic_user_file {tmp_path}/users;"
    with nginx_in_front(schema_registry, tmp_path, login) as url:
        yield {"url": url, "username": REGISTRY_USER, "password": REGISTRY_PASSWORD}


@pytest.fixture
def rate_limited_registry(schema_registry, tmp_path):
    """The session's registry behind nginx answering HTTP 429 to a client
    that asks more often than every 500 ms, as Confluent Cloud and API
    gateways do: its API root, and nginx's access log."""
    with nginx_in_front(
        schema_registry,
        tmp_path,
        "limit_req zone=registry;\n      limit_req_status 429;",
        http="limit_req_zone $binary_remote_addr zone=registry:1m rate=2r/s;",
    ) as url:
        yield url, tmp_path / "access.log"


@contextlib.contextmanager
def nginx_in_front(schema_registry: dict, folder: Path, settings: str, http: str = ""):
    """Runs nginx (Debian's package, installed if missing) as a proxy to the
    session's registry, with ``settings`` in its location and ``http`` in its
    http block; yields the registry's API root through it. Its error log goes
    to stderr, shown with a failing test's output; its access log, with
    each answer's status, to ``folder``/access.log."""
    if shutil.which("nginx") is None:
        install = ["apt-get", "install", "-y", "-q", "--no-install-recommends"]
        if subprocess.run([*install, "nginx-light"], check=False).returncode:
            subprocess.run(["apt-get", "update", "-q"], check=True)
            subprocess.run([*install, "nginx-light"], check=True)
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    port = free_port()
    (folder / "nginx.conf").write_text(
        f"""daemon off;
user root;
pid {folder}/nginx.pid;
error_log stderr warn;
events {{}}
http {{
  access_log {folder}/access.log;
  client_body_temp_path {folder}/body;
  proxy_temp_path {folder}/proxy;
  {http}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      {settings}
      proxy_pass http://127.0.0.1:{schema_registry["port"]};
    }}
  }}
}}
"""
    )
    process = subprocess.Popen(
        [nginx, "-p", str(folder), "-c", str(folder / "nginx.conf")]
    )
    deadline = time.monotonic() + 10
    while not _listening(port):
        assert process.poll() is None, "nginx exited: its errors are above"
        assert time.monotonic() < deadline, "nginx did not listen"
        time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}/apis/ccompat/v7"
    finally:
        process.terminate()
        process.wait(timeout=10)


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@pytest.fixture
def broker_log_on_failure(broker, request):
    failed = request.session.testsfailed
    yield broker
    if request.session.testsfailed > failed:
        print(f"\n--- broker log ({broker.log_path}) ---\n{broker.log_tail(80)}")
