"""The SparkSession of a project, built from ``spark.yml`` when first needed.

Kedro commands that only read configuration (``kedro catalog``, ``kedro viz``,
``kedro registry``) never start a JVM: the session starts when a pipeline
runs, or when a dataset of this package first loads or saves.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
import zipfile
from pathlib import Path
from urllib.parse import urlparse

import pyspark
from kedro.framework import project as kedro_project
from kedro.framework.context import KedroContext
from kedro.framework.hooks import hook_impl
from py4j.java_gateway import JavaGateway
from pyspark import SparkConf
from pyspark.errors import PySparkRuntimeError
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession
from pyspark.sql.utils import is_remote

from kedro_streaming._connectors.delta import check_delta_package
from kedro_streaming._spark import gateway_started, jvm_of, use_gateway
from kedro_streaming.errors import StreamingConfigError

# Spark's own packages, released with each Spark version: the Kafka connector
# and Avro support.
_SPARK_PACKAGE = re.compile(
    r"org\.apache\.spark:(?P<artifact>spark-sql-kafka-0-10|spark-avro)"
    r"_(?P<scala>[\d.]+):(?P<version>[^:,\s]+)"
)
_PACKAGE_NAMES = {"spark-sql-kafka-0-10": "the Kafka connector", "spark-avro": "Avro"}
_settings: dict[str, str] = {}
# Where a local Spark's UI listens (SPARK_LOCAL_IP, which Spark's UI reads).
_ui_address: list[str] = []
# Named as before 0.7.0: projects' logging.yml may set its level.
logger = logging.getLogger("kedro_streaming.session")
# spark-submit's report of what `spark.jars.packages` resolved: from its first
# line to the line that says how many jars it copied.
_IVY_REPORT_FIRST = (":: loading settings ::", "Ivy Default Cache set to:")
_IVY_REPORT_LAST = b"artifacts copied"
# The jars `spark.jars.packages` resolved to, remembered per set of packages
# so that later starts skip Ivy (about 0.5 s at every `kedro run`, with every
# jar already downloaded). Delete the folder to make Spark resolve again.
_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
RESOLVED_PACKAGES = _CACHE / "spark-packages"
# The classes Spark's JVM loads, archived by the JVM itself (class-data
# sharing) when the first run ends and mapped by every later start: the
# session starts about 2 s sooner, and plans and runs its first queries
# faster. One archive per Java and PySpark installation (100 to 200 MB).
# Delete the folder to archive again; -Xshare:off in
# spark.driver.extraJavaOptions goes without.
CLASS_ARCHIVES = _CACHE / "spark-class-archives"
# Options by which spark.yml already decides on class-data sharing.
_SHARING_OPTIONS = ("-Xshare", "SharedArchiveFile", "ArchiveClassesAtExit")
# The JVM reports on each class it could not archive; nothing to act on.
_SHARING_QUIET = "-Xlog:cds*=off"

# What decides what the packages resolve to.
_RESOLUTION_SETTINGS = (
    "spark.jars.packages",
    "spark.jars.repositories",
    "spark.jars.excludes",
    "spark.jars.ivy",
    "spark.jars.ivySettings",
)
# Versions that may resolve to other jars tomorrow: always resolved.
_MOVING_VERSION = re.compile(r"SNAPSHOT|latest\.|[\[\]()+]")


def configure_spark(
    settings: dict[str, object], streaming: dict[str, object] | None = None
) -> None:
    """Sets what the session is built from, without starting it.

    The Kafka connector and the Delta package in ``spark.jars.packages`` are
    checked against the installed PySpark here, so a mismatch fails before
    Spark downloads them.

    Args:
        settings: ``spark.yml``.
        streaming: ``streaming.yml`` and ``--params``: ``spark_ui_port`` and
            ``spark_ui_address`` set the UI's for one run.
    """
    conf = {key: str(value) for key, value in settings.items() if value is not None}
    streaming = streaming or {}
    if streaming.get("spark_ui_port") not in (None, ""):
        conf["spark.ui.port"] = str(streaming["spark_ui_port"])
    # Spark's own default lets anyone who reaches the UI kill its jobs.
    kill = streaming.get("spark_ui_kill_enabled")
    conf.setdefault(
        "spark.ui.killEnabled", "false" if kill in (None, "") else str(kill).lower()
    )
    _ui_address[:] = [str(streaming.get("spark_ui_address", "127.0.0.1") or "")]
    if not conf.get("spark.remote"):  # a Connect server brings its own packages
        for check in (check_kafka_connector, check_delta_package):
            check(
                conf.get("spark.jars.packages", ""),
                pyspark.__version__,
                local_scala_version(),
            )
    _settings.clear()
    _settings.update(conf)


def spark_session() -> SparkSession:
    """The project's SparkSession; the first call builds it from ``spark.yml``.

    ``spark.master`` says where Spark runs (``local[2]``, ``spark://``, ``yarn``,
    ``k8s://``); ``spark.remote`` (``sc://host:15002``) uses a Spark Connect
    server instead, and then ``spark.master`` is the server's to choose.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    conf = dict(_settings)
    resolved_here = False  # spark-submit resolved spark.jars.packages just now
    remote = conf.pop("spark.remote", None)
    if remote:
        conf.pop("spark.master", None)
        # PySpark's own switch to Spark Connect: every getOrCreate() in this
        # process (kedro-datasets' included) then returns this session.
        os.environ["SPARK_REMOTE"] = remote
    elif not gateway_started():
        _set_ui_address(conf)
        launch = without_resolution(conf)
        resolved_here = launch is conf
        _start_jvm(launch)
    try:
        spark = SparkSession.builder.config(map=conf).getOrCreate()
    except Exception as error:  # Py4J's error: Spark refused a setting
        if remote:
            raise
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        cause = next((line for line in lines if "Exception:" in line), lines[0])
        raise StreamingConfigError(
            f"Spark did not start with the settings of spark.yml: {cause} Fix "
            "conf/<env>/spark.yml (or the --params that set it)."
        ) from None
    if resolved_here:
        remember_resolution(conf, spark.sparkContext.getConf().get("spark.jars", ""))
    logger.info(
        "Spark %s on %s.",
        spark.version,
        f"the Spark Connect server {remote}" if remote else spark.sparkContext.master,
    )
    if remote:
        _log_settings_the_server_keeps(spark, conf, remote)
    else:
        spark.sparkContext.setLogLevel("WARN")
        if spark.sparkContext.uiWebUrl:
            logger.info(
                "Spark UI: %s (Structured Streaming tab: each query's batches).",
                spark.sparkContext.uiWebUrl,
            )
        # Delta's MERGE keeps its source in a local checkpoint, and Spark warns
        # that such an RDD cannot be recomputed, at every MERGE: not a problem.
        log4j = jvm_of(spark).org.apache.logging.log4j
        log4j.core.config.Configurator.setLevel(
            "org.apache.spark.rdd.MapPartitionsRDD", log4j.Level.ERROR
        )
    # The packages the running Spark loaded: a Connect server's or a cluster's
    # Spark may differ from the local PySpark.
    for check in (check_kafka_connector, check_delta_package):
        check(
            spark.conf.get("spark.jars.packages", None) or "",
            spark.version,
            None,
            fix=f"restart the Spark Connect server at {remote} with --packages"
            if remote
            else None,
        )
    if spark_location(spark):
        _send_project_code(spark)
    if not remote:
        from kedro_streaming._run.spark_settings import (  # noqa: PLC0415
            check_setting_classes,
            check_spark_settings,
        )

        check_spark_settings(spark, conf)
        check_setting_classes(spark, conf)
    return spark


def _set_ui_address(conf: dict[str, str]) -> None:
    """Has a local Spark's UI listen on ``spark_ui_address`` (Spark binds
    it to SPARK_LOCAL_IP, else every interface). Not on a cluster, whose
    executors must reach the driver at the address it binds."""
    address = _ui_address[0] if _ui_address else ""
    if address and conf.get("spark.master", "local").startswith("local"):
        os.environ["SPARK_LOCAL_IP"] = address


def without_resolution(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` with ``spark.jars.packages`` replaced by the jars it resolved
    to at an earlier start (``spark.jars``), when they are all still there;
    else ``conf`` itself, for spark-submit to resolve."""
    record = _resolution_record(conf)
    try:
        jars = json.loads(record.read_text())["jars"] if record else []
    except (OSError, ValueError, KeyError):
        return conf
    if not jars or not all(Path(urlparse(jar).path).is_file() for jar in jars):
        return conf
    logger.debug("Spark packages: the jars resolved before, from %s.", record)
    launch = {key: value for key, value in conf.items() if key != "spark.jars.packages"}
    return {**launch, "spark.jars": ",".join(jars)}


def remember_resolution(conf: dict[str, str], jars: str) -> None:
    """Keeps the jars (``spark.jars`` of the started session) that
    ``conf``'s packages resolved to, for ``without_resolution``."""
    record = _resolution_record(conf)
    if record is None or not jars:
        return
    packages = conf["spark.jars.packages"]
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        partial = record.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps({"packages": packages, "jars": jars.split(",")}))
        partial.replace(record)  # whole or not at all, for a run starting meanwhile
    except OSError as error:  # a read-only home: resolve at every start
        logger.debug("Spark packages: cannot remember their jars: %s", error)


def _resolution_record(conf: dict[str, str]) -> Path | None:
    """Where the jars of ``conf``'s packages are remembered; ``None`` when
    there is nothing to remember: no packages, versions that move, or jars
    of the user's own beside them."""
    packages = conf.get("spark.jars.packages", "").strip()
    if not packages or _MOVING_VERSION.search(packages) or conf.get("spark.jars"):
        return None
    settings = {key: conf.get(key) for key in _RESOLUTION_SETTINGS}
    key = json.dumps({**settings, "pyspark": pyspark.__version__}, sort_keys=True)
    return RESOLVED_PACKAGES / f"{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"


def spark_location(spark: SparkSession) -> str | None:
    """Where Spark runs, or ``None`` when it runs in this process (``local``).

    On a cluster or a Spark Connect server, a relative path means another
    machine's folder, or another process's.
    """
    if is_remote():
        return f"the Spark Connect server {os.environ.get('SPARK_REMOTE', '')}"
    master = spark.sparkContext.master
    return None if master.startswith("local") else f"the cluster {master}"


def _log_settings_the_server_keeps(
    spark: SparkSession, conf: dict[str, str], remote: str
) -> None:
    """Says which ``spark.yml`` settings a Spark Connect server did not take.

    A client sets only the SQL settings of its session; the rest (memory, jars,
    UI...) are the server's, set when it starts.
    """
    kept = sorted(
        key for key, value in conf.items() if spark.conf.get(key, None) != value
    )
    if kept:
        logger.info(
            "Spark Connect server %s (Spark %s) keeps its own %s: set them where "
            "the server starts.",
            remote,
            spark.version,
            ", ".join(kept),
        )


def _send_project_code(spark: SparkSession) -> None:
    """Sends the project's package, and this runtime, to the executors, for
    the Python functions they run (UDFs, and what pickles refer to).

    Executors on other machines (or a Connect server) have neither this
    process's source folder nor its site-packages.
    """
    if not kedro_project.PACKAGE_NAME:  # not in a Kedro project, e.g. a notebook
        return
    for name in (kedro_project.PACKAGE_NAME, __package__):
        _send_package(spark, name)


def _send_package(spark: SparkSession, name: str) -> None:
    """Sends one package as a zip: the archive it was imported from
    (``spark-submit --py-files``, which Spark itself puts on the driver's path
    only), else its folder zipped."""
    package = importlib.import_module(name)
    folder = Path(tempfile.mkdtemp(prefix="project-code-"))
    archive = folder / f"{name}.zip"
    imported_from = getattr(package.__loader__, "archive", None)
    if imported_from:
        shutil.copyfile(imported_from, archive)
    else:
        root = Path(package.__file__).parent
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
            for path in sorted(root.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    zipped.write(path, Path(name) / path.relative_to(root))
    if is_remote():
        spark.addArtifacts(str(archive), pyfile=True)
    else:
        spark.sparkContext.addPyFile(str(archive))
    logger.info("Sent the package %s to the executors as %s.", name, archive.name)


def _start_jvm(conf: dict[str, str]) -> None:
    """Starts Spark's JVM with the archive of its classes, or recording it."""
    archive = class_archive(conf)
    if archive is None:
        _start_jvm_without_ivy_report(conf)
    elif archive.is_file():
        try:
            _start_jvm_without_ivy_report(
                with_java_options(conf, f"-XX:SharedArchiveFile={archive}")
            )
        except PySparkRuntimeError:
            # An archive the JVM cannot map (a disk error, a copy cut short)
            # stops it at start; the next run archives again.
            logger.warning(
                "Spark's JVM did not start with %s: deleted, starting without it.",
                archive,
            )
            archive.unlink(missing_ok=True)
            _start_jvm_without_ivy_report(conf)
    else:
        recording = _claim_recording(archive)
        if recording is None:  # another run is recording it now
            _start_jvm_without_ivy_report(conf)
            return
        _prune_class_archives()
        _record_installation(archive)
        logger.info(
            "This run records the classes Spark loads, so that later runs start "
            "faster: once per Java and PySpark installation, it takes about 25 s "
            "longer (most of it writing the archive as it ends)."
        )
        gateway = _start_jvm_without_ivy_report(
            with_java_options(conf, f"-XX:ArchiveClassesAtExit={recording}")
        )
        # Registered after PySpark's own exit handlers, so it runs before them:
        # the JVM writes the archive as it exits, once this process is done.
        atexit.register(_keep_class_archive, gateway.proc, recording, archive)


def class_archive(conf: dict[str, str]) -> Path | None:
    """Where the archive of Spark's classes for this Java and PySpark is, or
    ``None`` where it is not used: ``spark.yml`` decides on class-data sharing
    itself, or the JVM could not read the path from its options."""
    options = conf.get("spark.driver.extraJavaOptions", "")
    if os.name != "posix" or any(option in options for option in _SHARING_OPTIONS):
        return None
    installation = _installation()
    if installation is None:  # no Java: spark-submit says so itself
        return None
    java, spark_home = installation
    key = json.dumps(
        [str(java), java.stat().st_mtime_ns, spark_home, pyspark.__version__]
    )
    archive = CLASS_ARCHIVES / f"{hashlib.sha256(key.encode()).hexdigest()[:20]}.jsa"
    # Spark splits the JVM's options at spaces; a JVM that once wrote no
    # archive (not HotSpot) would not write one the next time either.
    if re.search(r"\s", str(archive)) or archive.with_suffix(".failed").exists():
        return None
    return archive


def _installation() -> tuple[Path, str] | None:
    """The Java binary and the Spark (PySpark) folder a session starts with."""
    java_home = os.environ.get("JAVA_HOME")
    java = Path(java_home, "bin", "java") if java_home else shutil.which("java")
    try:
        java = Path(java).resolve(strict=True)
    except (OSError, TypeError):
        return None
    return java, os.environ.get("SPARK_HOME") or str(Path(pyspark.__file__).parent)


def _record_installation(archive: Path) -> None:
    """Notes beside ``archive`` what it was recorded for, to prune it later."""
    java, spark_home = _installation()
    record = {"java": str(java), "spark_home": spark_home}
    archive.with_suffix(".json").write_text(json.dumps(record))


def _prune_class_archives() -> None:
    """Deletes the archives (100 to 200 MB each) of the Java or Spark
    installations that are gone, such as a deleted virtualenv's PySpark."""
    for record in CLASS_ARCHIVES.glob("*.json"):
        try:
            paths = json.loads(record.read_text()).values()
        except (OSError, ValueError):  # being written: its installation is here
            continue
        if not all(Path(path).exists() for path in paths):
            for path in CLASS_ARCHIVES.glob(f"{record.stem}.*"):
                path.unlink(missing_ok=True)
            logger.info("Deleted the class archive of a removed installation.")


def with_java_options(conf: dict[str, str], option: str) -> dict[str, str]:
    """``conf`` with ``option`` added to the driver JVM's options, quietly."""
    options = conf.get("spark.driver.extraJavaOptions", "")
    options = f"{options} {option} {_SHARING_QUIET}".strip()
    return {**conf, "spark.driver.extraJavaOptions": options}


def _claim_recording(archive: Path) -> Path | None:
    """The path this run's JVM records the archive to, or ``None`` when a
    running process already records it (or nothing can be written)."""
    claim = archive.with_suffix(".recording")
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                descriptor = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                if _is_running(claim.read_text()):
                    return None
                # Its process ended without archiving (killed, or failed).
                claim.unlink(missing_ok=True)
                for partial in archive.parent.glob(f"{archive.stem}.*.partial"):
                    if not _is_running(partial.suffixes[-2].lstrip(".")):
                        partial.unlink(missing_ok=True)
                continue
            with os.fdopen(descriptor, "w") as file:
                file.write(str(os.getpid()))
            return archive.with_suffix(f".{os.getpid()}.partial")
    except OSError as error:  # a read-only home: no archive, every start as usual
        logger.debug("Spark's classes: cannot archive them: %s", error)
    return None


def _is_running(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except ValueError:  # the claim is being written
        return True
    except PermissionError:  # another user's process
        return True
    except OSError:
        return False
    return True


def _keep_class_archive(jvm: subprocess.Popen, recording: Path, archive: Path) -> None:
    """Lets the JVM end and write the archive, then puts it in place whole:
    a JVM started with an archive cut short crashes."""
    logger.info("Archiving the classes Spark loaded in %s...", archive.parent)
    try:
        jvm.stdin.close()  # Spark's JVM exits when its Python process is done
        jvm.wait(timeout=300)
        if jvm.returncode == 0 and recording.is_file():
            recording.replace(archive)
            size = archive.stat().st_size / 2**20
            logger.info(
                "Spark's classes archived (%.0f MB): later runs start faster.", size
            )
        elif jvm.returncode == 0:
            archive.with_suffix(".failed").touch()
            logger.info("This JVM does not archive classes; runs start without.")
    except (OSError, ValueError, subprocess.TimeoutExpired) as error:
        logger.debug("Spark's classes: the archive was not written: %s", error)
    finally:
        recording.unlink(missing_ok=True)
        archive.with_suffix(".recording").unlink(missing_ok=True)


def _start_jvm_without_ivy_report(conf: dict[str, str]) -> JavaGateway:
    """Starts Spark's JVM, keeping the dependency report off the console.

    spark-submit prints Ivy's report for ``spark.jars.packages`` at every start
    and has no setting against it. The JVM's stderr goes through a thread that
    drops the report once the resolution has succeeded (and shows it if not,
    since it then says why); every other line is passed on to stderr.
    """
    read_end, write_end = os.pipe()
    threading.Thread(
        target=_forward_stderr, args=(read_end,), name="spark-jvm-stderr", daemon=True
    ).start()
    try:
        gateway = launch_gateway(
            SparkConf(loadDefaults=False).setAll(list(conf.items())),
            # In a process group of its own: systemd, `kill -- -PGID` and other
            # supervisors signal a whole group, and SIGTERM or SIGHUP would end
            # the JVM (and its Python workers) under the queries this process
            # is stopping cleanly. The JVM still ends with this process: it
            # exits when its stdin closes.
            popen_kwargs={"stderr": write_end, "start_new_session": True},
        )
    finally:
        os.close(write_end)  # the JVM has its own copy
    use_gateway(gateway)
    return gateway


def _forward_stderr(read_end: int) -> None:
    held: list[bytes] = []
    with os.fdopen(read_end, "rb") as lines:
        for line in lines:
            if not held and line.decode(errors="replace").startswith(_IVY_REPORT_FIRST):
                held.append(line)
            elif held:
                held.append(line)
                if _IVY_REPORT_LAST in line:
                    held = []
            else:
                os.write(2, line)
    for line in held:  # the resolution did not finish: its report says why
        os.write(2, line)


def check_kafka_connector(
    packages: str,
    spark_version: str,
    scala_version: str | None,
    fix: str | None = None,
) -> None:
    """Fails unless Spark's packages among ``packages`` (the Kafka connector,
    Avro) fit this Spark.

    Args:
        packages: The value of ``spark.jars.packages``.
        spark_version: The version of the Spark that runs.
        scala_version: Its Scala binary version, if known.
        fix: Where to set the right connector; by default ``spark.yml``.
    """
    for match in _SPARK_PACKAGE.finditer(packages):
        wrong_version = match["version"] != spark_version
        wrong_scala = scala_version is not None and match["scala"] != scala_version
        if wrong_version or wrong_scala:
            scala = scala_version or match["scala"]
            raise StreamingConfigError(
                f"spark.yml asks for {_PACKAGE_NAMES[match['artifact']]} "
                f"{match[0]}, but the running Spark is {spark_version}"
                + (f" built for Scala {scala_version}" if scala_version else "")
                + f". Fix: {fix or 'in spark.jars.packages of conf/base/spark.yml, use'} "
                f"org.apache.spark:{match['artifact']}_{scala}:{spark_version}"
                + ("" if fix else ", or install the pyspark the package was built for")
                + "."
            )


def local_scala_version() -> str | None:
    """The Scala binary version of the Spark jars bundled with PySpark, e.g. 2.13."""
    jars = Path(pyspark.__file__).parent / "jars"
    for jar in jars.glob("scala-library-*.jar"):
        found = re.match(r"scala-library-(\d+\.\d+)", jar.name)
        if found:
            return found[1]
    return None


class SparkHooks:
    """Reads ``spark.yml``; the session itself starts with the first pipeline run."""

    @hook_impl
    def after_context_created(self, context: KedroContext) -> None:
        from kedro_streaming._run.state import streaming_settings  # noqa: PLC0415

        configure_spark(
            context.config_loader["spark"], streaming_settings(context.config_loader)
        )

    @hook_impl
    def before_pipeline_run(self) -> None:
        spark_session()
