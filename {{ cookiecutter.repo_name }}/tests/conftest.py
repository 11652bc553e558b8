"""One local SparkSession for the whole test run, and the stream harness."""

import itertools
import os

import pytest
from pyspark.sql import SparkSession

from {{ cookiecutter.python_package }}.streaming.testing import StreamTest

os.environ.setdefault("KEDRO_DISABLE_TELEMETRY", "true")


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    session = (
        SparkSession.builder.master("local[2]")
        .appName("tests")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        # As in conf/base/spark.yml: plans are final when planned.
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def stream_test(spark, tmp_path):
    """``StreamTest`` on the test session, each in a folder of the test's own:
    ``stream_test(node_function, streams={...}, static={...})``."""
    numbers = itertools.count()

    def make(target, **kwargs) -> StreamTest:
        workdir = tmp_path / f"stream-{next(numbers)}"
        return StreamTest(spark, target, workdir=workdir, **kwargs)

    return make
