"""The ``spark`` fixture (kedro-streaming's) with Delta, as conf/delta/spark.yml
sets it: the zone tables' tests keep changes in Delta tables."""

from pathlib import Path

import pytest
import yaml

DELTA_SETTINGS = ("spark.sql.extensions", "spark.sql.catalog.", "spark.databricks.")


@pytest.fixture(scope="session")
def spark_conf() -> dict[str, str]:
    conf = Path(__file__).resolve().parents[1] / "conf/delta/spark.yml"
    settings = yaml.safe_load(conf.read_text())
    # Delta's package only: the tests read no Kafka topic.
    delta = [p for p in settings["spark.jars.packages"].split(",") if "delta" in p]
    return {
        "spark.jars.packages": ",".join(delta),
        **{k: str(v) for k, v in settings.items() if k.startswith(DELTA_SETTINGS)},
    }
