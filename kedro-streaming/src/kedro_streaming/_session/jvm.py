"""Spark's JVM, started by this process: with an archive of the classes it
loads (recorded once per Java and PySpark installation, so that later runs
start faster), and without Ivy's report on the console."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import threading
from pathlib import Path

import pyspark
from py4j.java_gateway import JavaGateway
from pyspark import SparkConf
from pyspark.errors import PySparkRuntimeError
from pyspark.java_gateway import launch_gateway

from kedro_streaming._session.packages import CACHE
from kedro_streaming._spark import use_gateway
from kedro_streaming.errors import StreamingConfigError

# Named as before 0.7.0: projects' logging.yml may set its level.
logger = logging.getLogger("kedro_streaming.session")

# spark-submit's report of what `spark.jars.packages` resolved: from its first
# line to the line that says how many jars it copied.
_IVY_REPORT_FIRST = (":: loading settings ::", "Ivy Default Cache set to:")
_IVY_REPORT_LAST = b"artifacts copied"
# The classes Spark's JVM loads, archived by the JVM itself (class-data
# sharing) when the first run ends and mapped by every later start: the
# session starts about 2 s sooner. One archive (100 to 200 MB) per Java and
# PySpark installation; -Xshare:off in spark.driver.extraJavaOptions goes without.
CLASS_ARCHIVES = CACHE / "spark-class-archives"
# Options by which spark.yml already decides on class-data sharing.
_SHARING_OPTIONS = ("-Xshare", "SharedArchiveFile", "ArchiveClassesAtExit")
# The JVM reports on each class it could not archive; nothing to act on.
_SHARING_QUIET = "-Xlog:cds*=off"
# The JVM option naming the JIT's directives file, and the one without which
# the JVM refuses it.
_DIRECTIVES = "-XX:CompilerDirectivesFile="
_DIAGNOSTIC = "-XX:+UnlockDiagnosticVMOptions"


def with_project_files(conf: dict[str, str], project: Path) -> dict[str, str]:
    """``conf`` with the JIT directives file the driver's options name made
    absolute: a relative path is the project's, as the catalog's are.

    Example:
        >>> import tempfile
        >>> project = Path(tempfile.mkdtemp())
        >>> _ = (project / "jit.json").write_text("[]")
        >>> options = "-XX:+UnlockDiagnosticVMOptions -XX:CompilerDirectivesFile=jit.json"
        >>> conf = {"spark.driver.extraJavaOptions": options}
        >>> with_project_files(conf, project)["spark.driver.extraJavaOptions"] == (
        ...     f"-XX:+UnlockDiagnosticVMOptions -XX:CompilerDirectivesFile={project}/jit.json"
        ... )
        True
    """
    key = "spark.driver.extraJavaOptions"
    options = java_options(conf.get(key, ""))
    named = [option for option in options if option.startswith(_DIRECTIVES)]
    if not named:
        return conf
    path = Path(named[-1][len(_DIRECTIVES) :])
    absolute = path if path.is_absolute() else project / path
    if not absolute.is_file():
        raise StreamingConfigError(
            f"spark.yml's {key} names the JIT directives file {path}, which is not "
            f"there ({absolute}; a relative path is the project's): add the file, "
            f"or remove {_DIRECTIVES}{path} from {key}."
        )
    if _DIAGNOSTIC not in options[: options.index(named[-1])]:
        raise StreamingConfigError(
            f"spark.yml's {key} sets {_DIRECTIVES}{path}, which Java accepts only "
            f"after {_DIAGNOSTIC}: put that option before it, in the same setting."
        )
    resolved = [
        f"{_DIRECTIVES}{absolute}" if option.startswith(_DIRECTIVES) else option
        for option in options
    ]
    # Quoted where a path has a space or a quote (a project in `My Streams`):
    # Spark's launcher splits the options as bash does.
    return {**conf, key: shlex.join(resolved)}


def java_options(options: str) -> list[str]:
    """The JVM options of ``spark.driver.extraJavaOptions``, split as Spark's
    launcher splits them (bash's quotes and escapes).

    Example:
        >>> java_options("-Xss4m -Dname='My Streams' -Dother=\\"a b\\"")
        ['-Xss4m', '-Dname=My Streams', '-Dother=a b']
    """
    try:
        return shlex.split(options)
    except ValueError:  # an unbalanced quote: the JVM says what it makes of it
        return options.split()


def start_jvm(conf: dict[str, str]) -> None:
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


def records_class_archive(conf: dict[str, str]) -> bool:
    """Whether a JVM started now with ``conf`` would record the archive."""
    archive = class_archive(conf)
    return archive is not None and not archive.is_file()


def class_archive(conf: dict[str, str]) -> Path | None:
    """Where the archive of Spark's classes for this Java and PySpark is, or
    ``None`` where it is not used."""
    options = conf.get("spark.driver.extraJavaOptions", "")
    if os.name != "posix" or any(option in options for option in _SHARING_OPTIONS):
        return None
    installation = _installation()
    if installation is None:  # no Java: spark-submit says so itself
        return None
    java, spark_home = installation
    # The jars' folder's time too: a PySpark reinstalled at the same path has
    # new jars, which the JVM refuses to map against an older archive.
    jars = Path(spark_home, "jars")
    key = json.dumps(
        [
            str(java),
            java.stat().st_mtime_ns,
            spark_home,
            pyspark.__version__,
            jars.stat().st_mtime_ns if jars.is_dir() else None,
        ]
    )
    archive = CLASS_ARCHIVES / f"{hashlib.sha256(key.encode()).hexdigest()[:20]}.jsa"
    # A JVM that once wrote no archive (not HotSpot) would not write one the
    # next time either.
    if archive.with_suffix(".failed").exists():
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
    """Deletes the archives of Java or Spark installations that are gone."""
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
    options = f"{options} {shlex.quote(option)} {_SHARING_QUIET}".strip()
    return {**conf, "spark.driver.extraJavaOptions": options}


def _claim_recording(archive: Path) -> Path | None:
    """The path this run's JVM records the archive to, or ``None`` when
    another process records it (or nothing can be written)."""
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
    except (ValueError, PermissionError):  # being written; another user's
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
    """Starts Spark's JVM, its output through threads that drop Ivy's report
    of ``spark.jars.packages`` (unless the resolution failed) and the JVM's
    notes at start (``_JVM_START_NOTES``)."""
    pipes = {target: os.pipe() for target in (1, 2)}
    for target, (read_end, _) in pipes.items():
        threading.Thread(
            target=_forward,
            args=(read_end, target),
            name=f"spark-jvm-output-{target}",
            daemon=True,
        ).start()
    try:
        with _executor_environment(conf):
            gateway = launch_gateway(
                SparkConf(loadDefaults=False).setAll(list(conf.items())),
                # In a process group of its own: a supervisor's SIGTERM to the
                # group would end the JVM under the queries this process is
                # stopping cleanly. It still exits when its stdin closes.
                popen_kwargs={
                    "stdout": pipes[1][1],
                    "stderr": pipes[2][1],
                    "start_new_session": True,
                },
            )
    finally:
        for _, write_end in pipes.values():
            os.close(write_end)  # the JVM has its own copy
    use_gateway(gateway)
    return gateway


_EXECUTOR_ENV = "spark.executorEnv."


@contextlib.contextmanager
def _executor_environment(conf: dict[str, str]):
    """In local mode, the driver's JVM runs the tasks: it starts with the
    environment spark.yml gives executors (``spark.executorEnv.NAME``), as
    an executor would; a variable set in the shell wins. PySpark starts the
    JVM with this process's environment, so it is set here for that moment."""
    local = conf.get("spark.master", "local").startswith("local")
    added = {
        name: value
        for key, value in conf.items()
        if local
        and key.startswith(_EXECUTOR_ENV)
        and (name := key.removeprefix(_EXECUTOR_ENV))
        and name not in os.environ
    }
    os.environ.update(added)
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


# What HotSpot prints at every start, with a directives file and with the
# incubator module Spark 4 adds for its vector code: nothing to act on.
_JVM_START_NOTES = re.compile(
    rb"^(\d+ compiler directives added|WARNING: Using incubator modules: [\w.,]+)\s*$"
)


def _forward(read_end: int, target: int) -> None:
    held: list[bytes] = []
    with os.fdopen(read_end, "rb") as lines:
        for line in lines:
            if not held and line.decode(errors="replace").startswith(_IVY_REPORT_FIRST):
                held.append(line)
            elif held:
                held.append(line)
                if _IVY_REPORT_LAST in line:
                    held = []
            elif not _JVM_START_NOTES.match(line):
                os.write(target, line)
    for line in held:  # the resolution did not finish: its report says why
        os.write(target, line)
