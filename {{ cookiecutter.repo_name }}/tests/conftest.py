"""The ``spark`` fixture (kedro-streaming's) with Delta, as conf/delta/spark.yml
sets it, when a test that keeps changes in Delta tables runs (the zone
tables'): without one, the session starts without Delta's package."""

from pathlib import Path

import pytest
import yaml

DELTA_SETTINGS = ("spark.sql.extensions", "spark.sql.catalog.", "spark.databricks.")
NEEDS_DELTA = Path(__file__).parent / "pipelines" / "zones"


@pytest.fixture(scope="session")
def spark_conf(request) -> dict[str, str]:
    tests = request.session.items
    if not any(NEEDS_DELTA in Path(test.path).parents for test in tests):
        return {}
    conf = Path(__file__).resolve().parents[1] / "conf/delta/spark.yml"
    settings = yaml.safe_load(conf.read_text())
    # Delta's package only: the tests read no Kafka topic.
    delta = [p for p in settings["spark.jars.packages"].split(",") if "delta" in p]
    return {
        "spark.jars.packages": ",".join(delta),
        **{k: str(v) for k, v in settings.items() if k.startswith(DELTA_SETTINGS)},
    }
