"""What a local run's Spark UI exposes, as configured before Spark starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest
from kedro_streaming import (
    StreamingConfigError,
)
from kedro_streaming._connectors.delta import (
    check_delta_package,
)
from kedro_streaming._connectors.kafka.connector import check_kafka_connector
from kedro_streaming._session import jvm, packages, session
from kedro_streaming._session.defects import work_around_defects
from kedro_streaming._session.jvm import (
    _claim_recording,
    _prune_class_archives,
    _record_installation,
    class_archive,
)
from kedro_streaming._session.packages import (
    remember_resolution,
    without_resolution,
)

# Each Spark line this project runs on, with the Delta package made for it
# (Maven Central POMs: a line-suffixed artifact is built for its line, an
# unsuffixed one per DELTA_BUILT_FOR). 4.0.1, 4.0.2 and 4.3.x are here too:
# the checks hold for every release of a line, tested end to end or not.
DELTA_FOR_SPARK = {
    "4.0.0": "io.delta:delta-spark_4.0_2.13:4.4.0",
    "4.0.2": "io.delta:delta-spark_4.0_2.13:4.4.0",
    "4.1.1": "io.delta:delta-spark_4.1_2.13:4.4.0",
    "4.2.0": "io.delta:delta-spark_4.2_2.13:4.4.0",
}


# A session of the project's runtime in a process of its own, its JVM's
# options the first argument. It runs no job: the fewer classes, the sooner
# the JVM has written its archive.
ONE_SESSION = """
import sys
import pyspark
from kedro_streaming._session.session import configure_spark, spark_session
configure_spark({
    "spark.master": "local[1]",
    "spark.ui.enabled": "false",
    "spark.driver.extraJavaOptions": sys.argv[1],
})
assert spark_session().version == pyspark.__version__
"""


@pytest.fixture
def restored():
    """The module's settings as they were: other tests' session is built from them."""
    settings, address = dict(session._settings), list(session._ui_address)
    yield
    session._settings.clear()
    session._settings.update(settings)
    session._ui_address[:] = address


@pytest.mark.usefixtures("restored")
def test_spark_ui_on_this_machine_without_kill_links_unless_asked():
    session.configure_spark({"spark.master": "local[1]"}, {})
    assert session._settings["spark.ui.killEnabled"] == "false"
    assert session._ui_address == ["127.0.0.1"]

    session.configure_spark(
        {"spark.master": "local[1]"},
        {"spark_ui_address": "0.0.0.0", "spark_ui_kill_enabled": True},
    )
    assert session._settings["spark.ui.killEnabled"] == "true"
    assert session._ui_address == ["0.0.0.0"]

    # spark.yml's own setting wins.
    session.configure_spark(
        {"spark.master": "local[1]", "spark.ui.killEnabled": True},
        {"spark_ui_kill_enabled": False},
    )
    assert session._settings["spark.ui.killEnabled"] == "True"


def test_a_spark_ui_moved_off_a_taken_port_is_said_with_where_it_is():
    assert session.ui_port_moved("4050", "http://localhost:4051") == (
        "Spark UI: port 4050 is taken (another run's Spark UI, or another "
        "program), so Spark took 4051, the next free one: the UI is at "
        "http://localhost:4051. To choose its port, set spark_ui_port in "
        "streaming.yml (or `--params spark_ui_port=<port>`)."
    )
    assert "port 4040 is taken" in session.ui_port_moved("", "http://h:4041")
    for asked, url in (("4050", "http://localhost:4050"), ("0", "http://h:39001")):
        assert session.ui_port_moved(asked, url) is None


def test_the_project_and_the_runtime_reach_the_executors_as_packages(
    spark, tmp_path, monkeypatch
):
    """Executors elsewhere have neither the project's source nor the plugin:
    each arrives as a zip that a Python worker imports by its own name."""
    (tmp_path / "own_project").mkdir()
    (tmp_path / "own_project/__init__.py").write_text("NAME = 'own'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(session.kedro_project, "PACKAGE_NAME", "own_project")
    session._send_project_code(spark)

    def importable(_):
        import sys  # noqa: PLC0415 (on the executor)
        import zipimport  # noqa: PLC0415

        found = {}
        for path in sys.path:
            name = os.path.basename(path).removesuffix(".zip")
            if path.endswith(".zip") and name in ("own_project", "kedro_streaming"):
                found[name] = zipimport.zipimporter(path).find_spec(name) is not None
        return found

    worker = spark.sparkContext.parallelize([0], 1).map(importable).collect()
    assert worker == [{"own_project": True, "kedro_streaming": True}]


@pytest.mark.parametrize("spark_version", ["4.0.0", "4.0.2", "4.1.1", "4.2.0", "4.3.0"])
def test_kafka_connector_must_match_the_running_spark(spark_version):
    for wrong in ("3.5.1", "4.1.1" if spark_version != "4.1.1" else "4.2.0"):
        packages = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{wrong}"
        with pytest.raises(StreamingConfigError) as error:
            check_kafka_connector(packages, spark_version, "2.13")
        message = str(error.value)
        assert f"spark-sql-kafka-0-10_2.13:{wrong}, but the running Spark is" in message
        assert f"{spark_version} built for Scala 2.13" in message
        assert f"org.apache.spark:spark-sql-kafka-0-10_2.13:{spark_version}" in message

    check_kafka_connector(
        f"org.apache.spark:spark-sql-kafka-0-10_2.13:{spark_version}",
        spark_version,
        "2.13",
    )
    # A Spark Connect server's connector is fixed where the server starts.
    with pytest.raises(StreamingConfigError, match="Fix: restart the server with"):
        check_kafka_connector(
            "org.apache.spark:spark-sql-kafka-0-10_2.12:3.5.1",
            spark_version,
            None,
            fix="restart the server with",
        )


@pytest.mark.parametrize("spark_version", [*DELTA_FOR_SPARK, "4.3.0"])
def test_delta_package_must_be_built_for_the_running_spark(spark_version):
    right = DELTA_FOR_SPARK.get(spark_version)
    line = spark_version.rsplit(".", 1)[0]
    if right:
        check_delta_package(
            f"org.apache.spark:spark-sql-kafka-0-10_2.13:{spark_version},{right}",
            spark_version,
            "2.13",
        )
    # The same Delta release built for another Spark line, suffixed or not.
    for wrong, built_for in (
        ("io.delta:delta-spark_2.13:3.2.0", "3.5"),
        ("io.delta:delta-spark_2.13:4.3.0", "4.1"),
        ("io.delta:delta-spark_2.13:4.4.0", "4.2"),
        ("io.delta:delta-spark_4.0_2.13:4.4.0", "4.0"),
        ("io.delta:delta-spark_4.1_2.13:4.4.0", "4.1"),
    ):
        if built_for == line:
            check_delta_package(wrong, spark_version, "2.13")
            continue
        with pytest.raises(StreamingConfigError) as error:
            check_delta_package(wrong, spark_version, "2.13")
        message = str(error.value)
        assert f"{wrong}, built for Spark {built_for}" in message
        assert f"running Spark is {spark_version} built for Scala 2.13" in message
        assert (
            f"Fix: set spark.jars.packages in the environment's spark.yml to {right} ("
            if right
            else f"a Delta release built for Spark {line}; this project knows none"
        ) in message


def test_packages_resolved_at_one_start_are_jars_at_the_next(tmp_path, monkeypatch):
    """The same packages skip Ivy while every jar they resolved to is there;
    other packages, a version that moves or a deleted jar resolve again."""
    monkeypatch.setattr(packages, "RESOLVED_PACKAGES", tmp_path / "resolved")
    jars = [tmp_path / "connector.jar", tmp_path / "clients.jar"]
    for jar in jars:
        jar.write_bytes(b"")
    conf = {"spark.master": "local[2]", "spark.jars.packages": "org.example:a:1.0"}
    assert without_resolution(conf) is conf  # nothing resolved yet

    remember_resolution(conf, ",".join(jar.as_uri() for jar in jars))
    assert without_resolution(conf) == {
        "spark.master": "local[2]",
        "spark.jars": f"{jars[0].as_uri()},{jars[1].as_uri()}",
    }
    other = {**conf, "spark.jars.packages": "org.example:a:1.1"}
    assert without_resolution(other) is other
    moving = {**conf, "spark.jars.packages": "org.example:a:1.1-SNAPSHOT"}
    remember_resolution(moving, jars[0].as_uri())
    assert without_resolution(moving) is moving
    jars[1].unlink()
    assert without_resolution(conf) is conf

    # Where nothing can be written, every start resolves, and none fails.
    (tmp_path / "a-file").write_bytes(b"")
    monkeypatch.setattr(packages, "RESOLVED_PACKAGES", tmp_path / "a-file/resolved")
    remember_resolution(conf, jars[0].as_uri())
    assert without_resolution(conf) is conf


# A `kedro run`'s start, in a process of its own: the JVM started ahead in
# the run's command, while Kedro builds its catalog, then the session on it.
AHEAD_SESSION = """
import sys, threading, click
from kedro_streaming._session import session
session.configure_spark({
    "spark.master": "local[1]",
    "spark.ui.enabled": "false",
    "spark.driver.extraJavaOptions": sys.argv[1],
})
for name in ("catalog", "viz", "ipython", None):
    with click.Context(click.Command(name), info_name=name) if name else open(0):
        assert not session._running_a_pipeline(), name
with click.Context(click.Command("run"), info_name="run"):
    assert session._running_a_pipeline()
    session.start_jvm_ahead()
print("AHEAD", [t.name for t in threading.enumerate()].count("spark-jvm-start"))
try:
    print("SESSION", session.spark_session().version)
except Exception as error:
    print("REFUSED", type(error).__name__, getattr(error, "getCondition", str)())
"""


@pytest.mark.parametrize(
    ("options", "outcome"),
    [
        ("-Xshare:off", f"SESSION {pyspark.__version__}"),
        # Java refuses the stack size: the session says what starting it would.
        ("-Xshare:off -Xss1k", "REFUSED PySparkRuntimeError JAVA_GATEWAY_EXITED"),
    ],
    ids=["started", "java-refuses"],
)
def test_a_run_starts_java_ahead_and_builds_its_session_on_it(
    tmp_path, options, outcome
):
    """`kedro run` starts the JVM as its context is made, and the session
    builds on it (or says why Java did not start) when the run needs it;
    other commands start none."""
    started = subprocess.run(
        [sys.executable, "-c", AHEAD_SESSION, options],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=True,
    )
    said = ("AHEAD", "SESSION", "REFUSED")  # Java's own lines aside
    lines = [line for line in started.stdout.splitlines() if line.startswith(said)]
    assert lines[0] == "AHEAD 1"
    assert lines[1].startswith(outcome), started.stdout + started.stderr


# A session whose spark.yml gives executors an environment variable: what
# its JVM and this process then have.
ENV_SESSION = """
import os
from kedro_streaming._session.session import configure_spark, spark_session
configure_spark({
    "spark.master": "local[1]",
    "spark.ui.enabled": "false",
    "spark.driver.extraJavaOptions": "-Xshare:off",
    "spark.executorEnv.MALLOC_ARENA_MAX": "2",
})
print("JVM", spark_session()._jvm.java.lang.System.getenv("MALLOC_ARENA_MAX"))
print("PYTHON", os.environ.get("MALLOC_ARENA_MAX"))
"""


@pytest.mark.parametrize(
    ("shell", "said"),
    [(None, ["JVM 2", "PYTHON None"]), ("4", ["JVM 4", "PYTHON 4"])],
    ids=["from spark.yml", "the shell's wins"],
)
def test_a_local_driver_starts_with_the_executors_environment(tmp_path, shell, said):
    """In local mode the driver's JVM runs the tasks, so it starts with
    `spark.executorEnv.*` (glibc reads MALLOC_ARENA_MAX only as a process
    starts); this process's own environment is left as it was."""
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    started = subprocess.run(
        [sys.executable, "-c", ENV_SESSION],
        cwd=tmp_path,
        env=env if shell is None else {**env, "MALLOC_ARENA_MAX": shell},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=True,
    )
    lines = started.stdout.splitlines()
    assert [line for line in lines if line.startswith(("JVM", "PYTHON"))] == said


def test_spark_classes_archived_at_one_start_are_mapped_by_the_next(tmp_path):
    """The first start records Spark's classes, the next maps them; an archive
    the JVM cannot map is deleted and the session starts without it. The cache
    is where macOS keeps one, a space in its path."""
    cache = tmp_path / "Application Support" / "Caches"
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    archives = cache / "spark-class-archives"

    def start(java_options: str = "") -> None:
        subprocess.run(
            [sys.executable, "-c", ONE_SESSION, java_options],
            cwd=tmp_path,  # where a crashed JVM leaves its report
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )

    start()
    # Whole, and what it was recorded for: nothing partial or claimed is left.
    archive, record = sorted(archives.iterdir(), key=lambda path: path.suffix)
    assert (archive.suffix, record.name) == (".jsa", f"{archive.stem}.json")
    assert json.loads(record.read_text())["spark_home"] == str(
        Path(pyspark.__file__).parent
    )

    classes = tmp_path / "classes.log"
    start(f"-Xlog:class+load=info:file={classes}")
    assert "org.apache.spark.SparkContext source: shared objects file (top)" in (
        classes.read_text()
    )

    archive.write_bytes(archive.read_bytes()[: 2**20])  # a copy cut short
    start()  # starts all the same
    assert not archive.exists()


def test_one_process_at_a_time_records_the_class_archive(tmp_path, monkeypatch):
    """While a running process records the archive, others start without;
    the claim of a process that ended without archiving is taken over."""
    monkeypatch.setattr(jvm, "CLASS_ARCHIVES", tmp_path)
    archive = class_archive({})
    assert archive.parent == tmp_path
    assert class_archive({"spark.driver.extraJavaOptions": "-Xshare:off"}) is None

    recording = _claim_recording(archive)
    assert recording == archive.with_suffix(f".{os.getpid()}.partial")
    assert _claim_recording(archive) is None  # this process is running

    ended_pid = int(
        subprocess.check_output([sys.executable, "-c", "import os; print(os.getpid())"])
    )
    archive.with_suffix(".recording").write_text(str(ended_pid))
    left_behind = archive.with_suffix(f".{ended_pid}.partial")
    left_behind.write_bytes(b"cut short")
    assert _claim_recording(archive) == recording
    assert not left_behind.exists()

    archive.with_suffix(".failed").touch()  # a JVM that wrote no archive
    assert class_archive({}) is None

    # The archives of installations that are gone are deleted, others kept.
    gone = tmp_path / "0123.jsa"
    gone.write_bytes(b"classes")
    gone.with_suffix(".json").write_text(json.dumps({"spark_home": "/removed"}))
    _record_installation(archive)
    _prune_class_archives()
    assert {path.name for path in tmp_path.iterdir()} == {
        archive.with_suffix(suffix).name
        for suffix in (".failed", ".json", ".recording")
    }


DIRECTIVES = "-XX:CompilerDirectivesFile="
UNLOCK = "-XX:+UnlockDiagnosticVMOptions"


@pytest.mark.parametrize(
    ("options", "error"),
    [
        (f"{UNLOCK} {DIRECTIVES}conf/jit.json", None),
        (f"-Xss4m {UNLOCK} {DIRECTIVES}{{project}}/conf/jit.json", None),
        (f"{UNLOCK} {DIRECTIVES}conf/none.json", "which is not there"),
        (f"{DIRECTIVES}conf/jit.json", "put that option before it"),
        (f"{DIRECTIVES}conf/jit.json {UNLOCK}", "put that option before it"),
        (f"-Dname='a b' {UNLOCK} {DIRECTIVES}conf/jit.json", None),
    ],
    ids=[
        "relative",
        "absolute",
        "missing",
        "not unlocked",
        "unlocked after",
        "a quoted option kept",
    ],
)
def test_the_jit_directives_file_is_the_project_s_or_refused_before_java(
    tmp_path, options, error
):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf/jit.json").write_text("[]")
    key = "spark.driver.extraJavaOptions"
    conf = {key: options.format(project=tmp_path)}
    if error:
        with pytest.raises(StreamingConfigError, match=error):
            jvm.with_project_files(conf, tmp_path)
    else:
        resolved = jvm.java_options(jvm.with_project_files(conf, tmp_path)[key])
        assert resolved[-2:] == [UNLOCK, f"{DIRECTIVES}{tmp_path}/conf/jit.json"]
        assert "-Dname=a b" in resolved or "-Dname" not in options


DIRECTIVES_SESSION = """
import json
import sys
from pathlib import Path
from kedro_streaming._session.session import configure_spark, spark_session
configure_spark(
    {"spark.master": "local[1]", "spark.ui.enabled": "false",
     "spark.driver.extraJavaOptions": sys.argv[1]},
    project=Path(sys.argv[2]),
)
jvm = spark_session()._jvm
arguments = jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
print("ARGUMENTS", json.dumps(list(arguments.getInputArguments())))
"""


def test_a_run_in_a_project_s_subfolder_starts_java_with_its_jit_directives(tmp_path):
    """The JIT reads the project's directives file (which it would refuse to
    start without) from any folder, in a project whose path has a space and
    non-ASCII letters, and Java says nothing of it on the console."""
    tmp_path = tmp_path / "My Streams" / "Données été"
    (tmp_path / "conf/kafka").mkdir(parents=True)
    (tmp_path / "conf/kafka/jit.json").write_text(
        '[{"match": "org/apache/spark/sql/catalyst/expressions/GeneratedClass*.*",'
        ' "c2": {"Exclude": true}}]'
    )
    (tmp_path / "notebooks").mkdir()
    started = subprocess.run(
        [
            sys.executable,
            "-c",
            DIRECTIVES_SESSION,
            f"{UNLOCK} {DIRECTIVES}conf/kafka/jit.json",
            str(tmp_path),
        ],
        cwd=tmp_path / "notebooks",
        capture_output=True,
        text=True,
        check=True,
    )
    arguments = json.loads(started.stdout.split("ARGUMENTS ", 1)[1].splitlines()[0])
    assert f"{DIRECTIVES}{tmp_path}/conf/kafka/jit.json" in arguments
    # Nor of the incubator module that Spark 4 adds at every start.
    for note in ("compiler directives added", "Using incubator modules"):
        assert note not in started.stdout + started.stderr


COLUMNAR_INPUT = "spark.sql.execution.arrow.pythonUDF.columnarInput.enabled"


@pytest.mark.parametrize(
    ("chosen", "after"),
    [
        pytest.param({}, "false", id="worked-around"),
        pytest.param({COLUMNAR_INPUT: "true"}, "true", id="the-project-s-choice"),
    ],
)
def test_spark_4_2_0_s_udf_defect_is_worked_around_unless_the_project_chose(
    spark, chosen, after, caplog
):
    assert spark.version == "4.2.0", "the defect and its workaround are 4.2.0's"
    spark.conf.set(COLUMNAR_INPUT, "true")  # Spark 4.2.0's default
    try:
        with caplog.at_level("INFO", logger="kedro_streaming.session"):
            applied = work_around_defects(spark, chosen=chosen)
        assert spark.conf.get(COLUMNAR_INPUT) == after
    finally:
        spark.conf.set(COLUMNAR_INPUT, "false")
    said = [
        "Spark 4.2.0: spark.sql.execution.arrow.pythonUDF.columnarInput.enabled="
        "false, or a Python UDF over a parquet or Delta source waits for ever "
        "(SPARK-58241, fixed in 4.2.1). Set it in spark.yml to choose otherwise."
    ]
    assert caplog.messages == (said if applied else [])
    assert [w.setting for w in applied] == ([] if chosen else [COLUMNAR_INPUT])
