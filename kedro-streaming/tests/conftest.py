"""The plugin's tests take no fixed port: each takes a free one (bind to
port 0). To prove it, the session holds the default ports of a project's
services (``DEFAULT_PORTS``: Kafka's 9092-9095, metrics 9464, Spark UI 4040,
registry 8081, Spark's 7077 and 15002), those of them free when it starts,
bound and listening throughout: a test that takes one fails."""

from __future__ import annotations

import pytest
from kedro_streaming.devtools.processes import DEFAULT_PORTS, hold_ports


@pytest.fixture(scope="session", autouse=True)
def default_ports_held():
    with hold_ports(DEFAULT_PORTS) as held:
        yield held


@pytest.fixture(scope="session")
def spark_conf() -> dict[str, str]:
    """Delta in the session (the tables kept from changes): its package for
    this PySpark's line, as conf/delta/spark.yml names it."""
    import pyspark  # noqa: PLC0415 (only when a test asks for Spark)
    from kedro_streaming import delta_package_for  # noqa: PLC0415

    return {
        "spark.jars.packages": delta_package_for(pyspark.__version__),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": (
            "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        ),
        # As conf/delta/spark.yml: a table's state in 2 tasks, not Delta's 50.
        "spark.databricks.delta.snapshotPartitions": "2",
    }
