"""pytest fixtures of kedro-streaming, in every project that installs it.

- ``spark``: one local SparkSession for the whole test run (``local[2]``,
  UTC, two shuffle partitions, no UI), with ``spark_conf``'s settings (none
  unless a project's ``conftest.py`` gives some). A project's own ``spark``
  fixture takes its place.
- ``stream_test``: ``StreamTest`` on that session, in a folder of the test's
  own: ``stream_test(node_function, streams={...}, static={...})``.
- ``project_parameters``: the project's parameters as ``kedro run`` reads
  them (``conf/base`` then ``conf/local``, with the project's settings), so
  that a test runs a node with the project's own schema and rules::

      static={"params:record_schema": project_parameters["record_schema"]}
"""

from __future__ import annotations

import itertools
import os
import sys

import pytest

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


@pytest.fixture(scope="session")
def spark_conf() -> dict[str, str]:
    """Settings the ``spark`` fixture adds to its own; a project's
    ``conftest.py`` overrides it, e.g. for Delta's package and catalog."""
    return {}


@pytest.fixture(scope="session")
def spark(spark_conf):
    from pyspark.sql import SparkSession  # noqa: PLC0415 (tests that use Spark)

    from kedro_streaming._session.defects import work_around_defects  # noqa: PLC0415

    # Python workers (UDFs, transformWithState) in this interpreter, not
    # `python3` from PATH: PySpark reads PYSPARK_PYTHON when the session starts.
    chosen = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = chosen or sys.executable
    builder = SparkSession.builder
    for key, value in spark_conf.items():
        builder = builder.config(key, value)
    session = (
        builder.master("local[2]")
        .appName("tests")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        # As a project's spark.yml: plans are final when planned.
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # As a project's spark.yml: state in RocksDB (transformWithState
        # needs it), each batch writing only its changes.
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        .config(
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
            "true",
        )
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    work_around_defects(session, chosen=spark_conf)
    yield session
    session.stop()
    if chosen is None:
        del os.environ["PYSPARK_PYTHON"]


@pytest.fixture(scope="session")
def project_parameters(request) -> dict:
    """The parameters of the Kedro project pytest runs in (its rootdir)."""
    from kedro.framework.project import settings  # noqa: PLC0415
    from kedro.framework.startup import bootstrap_project  # noqa: PLC0415

    root = request.config.rootpath
    bootstrap_project(root)  # the project's settings.py: its config loader
    loader = settings.CONFIG_LOADER_CLASS(
        conf_source=str(root / settings.CONF_SOURCE),
        **settings.CONFIG_LOADER_ARGS,
    )
    return dict(loader["parameters"])


@pytest.fixture
def stream_test(spark, tmp_path):
    """``StreamTest`` on the test session, each in a folder of the test's own;
    the queries that run from step to step are stopped after the test."""
    from kedro_streaming.testing import StreamTest  # noqa: PLC0415

    numbers = itertools.count()
    made: list[StreamTest] = []

    def make(target, **kwargs) -> StreamTest:
        workdir = tmp_path / f"stream-{next(numbers)}"
        made.append(StreamTest(spark, target, workdir=workdir, **kwargs))
        return made[-1]

    yield make
    for stream in made:
        stream.close()
