"""A project moved to another Spark release (``kedro streams spark-line``)."""

from __future__ import annotations

import pyspark
import pytest
from kedro_streaming import move_to_spark
from kedro_streaming._session.lines import project_spark
from kedro_streaming._spark import class_loads
from kedro_streaming.errors import StreamingConfigError

# A project as `kedro new` writes it for Spark 4.0.0 (the lines that pin it),
# with a setting of the user's own and a package of their own beside them.
MADE_FOR_4_0 = {
    "requirements.txt": "kedro~=1.0\n# keep = the connector\npyspark==4.0.0\n",
    "pyproject.toml": 'dependencies = [\n    "pyspark[connect]==4.0.0",\n]\n',
    "conf/base/spark.yml": (
        "# Must match the running Spark (pyspark==4.0.0).\n"
        "spark.jars.packages: org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0,"
        "org.apache.spark:spark-avro_2.13:4.0.0,com.example:udfs_2.13:4.0.0\n"
        "spark.sql.streaming.checkpointFileManagerClass: "
        "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager\n"
        "spark.sql.shuffle.partitions: 2\n"
    ),
    "conf/delta/spark.yml": (
        "spark.jars.packages: >-\n"
        "  org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0,"
        "io.delta:delta-spark_4.0_2.13:4.4.0\n"
    ),
}
KAFKA, AVRO = "spark-sql-kafka-0-10_2.13", "spark-avro_2.13"
MANAGER = (
    "org.apache.spark.sql.execution.streaming.{}FileSystemBasedCheckpointFileManager"
)


def test_a_project_moves_up_line_by_line_and_only_its_spark_pins_change(
    tmp_path, spark
):
    for name, text in MADE_FOR_4_0.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)

    changes = move_to_spark(tmp_path, "4.1.1")
    assert [str(change) for change in changes] == [
        "requirements.txt: pyspark==4.0.0 -> pyspark==4.1.1",
        "pyproject.toml: pyspark[connect]==4.0.0 -> pyspark[connect]==4.1.1",
        "conf/base/spark.yml: pyspark==4.0.0 -> pyspark==4.1.1",
        f"conf/base/spark.yml: org.apache.spark:{KAFKA}:4.0.0 -> "
        f"org.apache.spark:{KAFKA}:4.1.1",
        f"conf/base/spark.yml: org.apache.spark:{AVRO}:4.0.0 -> "
        f"org.apache.spark:{AVRO}:4.1.1",
        f"conf/base/spark.yml: {MANAGER.format('')} -> "
        f"{MANAGER.format('checkpointing.')}",
        f"conf/delta/spark.yml: org.apache.spark:{KAFKA}:4.0.0 -> "
        f"org.apache.spark:{KAFKA}:4.1.1",
        "conf/delta/spark.yml: io.delta:delta-spark_4.0_2.13:4.4.0 -> "
        "io.delta:delta-spark_4.1_2.13:4.4.0",
    ]
    assert project_spark(tmp_path) == "4.1.1"

    # On to this test's Spark: the whole files, the user's lines as they were.
    version = pyspark.__version__
    line = ".".join(version.split(".")[:2])
    move_to_spark(tmp_path, version)
    moved = {name: (tmp_path / name).read_text() for name in MADE_FOR_4_0}
    assert moved == {
        name: text.replace("4.0.0", version)
        .replace("_4.0_", f"_{line}_")
        .replace(MANAGER.format(""), MANAGER.format("checkpointing."))
        .replace("com.example:udfs_2.13:" + version, "com.example:udfs_2.13:4.0.0")
        for name, text in MADE_FOR_4_0.items()
    }
    # The class it names is the one this Spark has.
    assert class_loads(spark, MANAGER.format("checkpointing."))
    assert move_to_spark(tmp_path, version) == []


@pytest.mark.parametrize(
    ("version", "older", "refusal"),
    [
        ("4.3.0", False, "Spark 4.3.0 is not a release of a line this"),
        ("4.2", False, "Spark 4.2 is not a release of a line this"),
        ("4.0.0", False, "Spark 4.0.0 is older than the project's 4.1.1"),
    ],
    ids=["a line not tested", "not a release", "older without --older"],
)
def test_a_move_the_plugin_cannot_stand_behind_is_refused_and_nothing_changes(
    tmp_path, version, older, refusal
):
    (tmp_path / "requirements.txt").write_text("pyspark==4.1.1\n")
    with pytest.raises(StreamingConfigError, match=refusal):
        move_to_spark(tmp_path, version, older=older)
    assert (tmp_path / "requirements.txt").read_text() == "pyspark==4.1.1\n"
    # A rollback, asked for, is made.
    if "older" in refusal:
        assert len(move_to_spark(tmp_path, version, older=True)) == 1


def test_a_project_without_a_pyspark_pin_is_refused_with_its_fix(tmp_path):
    (tmp_path / "requirements.txt").write_text("kedro~=1.0\n")
    with pytest.raises(StreamingConfigError, match="pins no pyspark"):
        move_to_spark(tmp_path, "4.2.0")
