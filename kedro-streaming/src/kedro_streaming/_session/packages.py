"""The packages of ``spark.yml`` (``spark.jars.packages``): resolved once and
remembered as jars, checked against the running Spark line, and sent to
the executors."""

from __future__ import annotations

import atexit
import hashlib
import importlib
import json
import logging
import os
import re
import shutil
import tempfile
import zipfile
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyspark
from pyspark.sql import SparkSession
from pyspark.sql.utils import is_remote

# Named as before 0.7.0: projects' logging.yml may set its level.
logger = logging.getLogger("kedro_streaming.session")
# Where runs keep what they may reuse: resolved packages, class archives.
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")

# The jars `spark.jars.packages` resolved to, remembered per set of packages
# so that later starts skip Ivy (about 0.5 s at every `kedro run`).
RESOLVED_PACKAGES = CACHE / "spark-packages"
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


def without_resolution(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` with ``spark.jars.packages`` replaced by the jars it resolved
    to at an earlier start (``spark.jars``), when they are all still there;
    else ``conf`` itself, for spark-submit to resolve."""
    record = _resolution_record(conf)
    try:
        jars = json.loads(record.read_text())["jars"] if record else []
    except (OSError, ValueError, KeyError):
        return conf
    if not jars or not all(Path(unquote(urlparse(jar).path)).is_file() for jar in jars):
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
    """Where the jars of ``conf``'s packages are remembered; ``None`` for no
    packages, versions that move, or jars of the user's own beside them."""
    packages = conf.get("spark.jars.packages", "").strip()
    if not packages or _MOVING_VERSION.search(packages) or conf.get("spark.jars"):
        return None
    settings = {key: conf.get(key) for key in _RESOLUTION_SETTINGS}
    key = json.dumps({**settings, "pyspark": pyspark.__version__}, sort_keys=True)
    return RESOLVED_PACKAGES / f"{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"


def send_package(spark: SparkSession, name: str) -> None:
    """Sends one package as a zip: the archive it was imported from
    (``spark-submit --py-files``), else its folder zipped."""
    package = importlib.import_module(name)
    folder = Path(tempfile.mkdtemp(prefix="project-code-"))
    # Executors fetch it from here as long as the session lives (those that
    # join late too): removed when the run's process ends.
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
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


def local_scala_version() -> str | None:
    """The Scala binary version of the Spark jars bundled with PySpark, e.g. 2.13.

    Example:
        >>> import pyspark
        >>> from kedro_streaming import check_kafka_connector, local_scala_version
        >>> local_scala_version()  # PySpark 4 bundles Spark built for Scala 2.13
        '2.13'
        >>> version = pyspark.__version__
        >>> spark_yml = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"
        >>> check_kafka_connector(spark_yml, version, local_scala_version())
    """
    jars = Path(pyspark.__file__).parent / "jars"
    for jar in jars.glob("scala-library-*.jar"):
        found = re.match(r"scala-library-(\d+\.\d+)", jar.name)
        if found:
            return found[1]
    return None
