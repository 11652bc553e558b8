"""A run killed (SIGKILL) in the middle of a type 1 table's MERGE, or right
after it commits but before Spark records its micro-batch, then run again:
the tables are the replay of every change, and each micro-batch is one
commit of the table (the replayed MERGE is skipped by its idempotent pair)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.connectors.test_changes import (
    cdc_catalog,
    cdc_run,
    change,
    debezium_event,
    replay_type1,
    replay_type2,
    table,
)

# The run, in its own process: it kills itself during the MERGE of micro-batch
# 1 (as soon as a data file of it appears, before its commit), or just after
# that MERGE commits.
KILLED = """
import glob, os, signal, sys, threading, time
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession
from kedro_streaming import delta_package_for
from kedro_streaming._connectors import scd
from tests.connectors.test_changes import cdc_catalog, cdc_run

folder, point = Path(sys.argv[1]), sys.argv[2]
(
    SparkSession.builder.master("local[2]")
    .config("spark.jars.packages", delta_package_for(pyspark.__version__))
    .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
    .config("spark.sql.catalog.spark_catalog",
            "org.apache.spark.sql.delta.catalog.DeltaCatalog")
    .config("spark.databricks.delta.snapshotPartitions", "2")
    .config("spark.sql.shuffle.partitions", "2")
    .getOrCreate()
)
real_merge = scd._merge

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def merge(spark, t, latest, first_load, inserts):
    batch = spark.conf.get("spark.databricks.delta.write.txnVersion")
    if batch != "1" or not t.path.endswith("customers"):
        return real_merge(spark, t, latest, first_load, inserts)
    if point == "during":
        before = set(glob.glob(t.path + "/*.parquet"))

        def watch():
            while not set(glob.glob(t.path + "/*.parquet")) - before:
                time.sleep(0.002)
            die()

        threading.Thread(target=watch, daemon=True).start()
    done = real_merge(spark, t, latest, first_load, inserts)
    die()

scd._merge = merge
cdc_run(cdc_catalog(folder, files_per_batch=1))
"""


def change_log(seed: int) -> list[list[dict]]:
    """Two files of a database's changes: creates, updates, deletes, late
    ones and copies, over 40 keys."""
    rng = random.Random(seed)
    files, lsn = [], 0
    for _ in range(2):
        changes = []
        for _ in range(120):
            lsn += 10
            op = rng.choice("cuuud")
            changes.append(change(rng.randrange(40), lsn, op, f"n{rng.randrange(9)}"))
        # Late: an older sequence no other change has (it ends in 5).
        late = [dict(c, lsn=c["lsn"] - 195) for c in rng.sample(changes, 10)]
        copies = rng.sample(changes, 10)
        files.append(changes + late + copies)
    return files


def commits(table: Path) -> list[dict]:
    """The table's commits: each one's micro-batch (its idempotent pair) and
    the data files it added."""
    found = []
    for entry in sorted((table / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in entry.read_text().splitlines()]
        found.append(
            {
                "batch": next(
                    (a["txn"]["version"] for a in actions if "txn" in a), None
                ),
                "added": {a["add"]["path"] for a in actions if "add" in a},
            }
        )
    return found


# Killed as the MERGE writes its files, before its commit, the run leaves
# files no commit names: Delta's atomic commit, which the rerun's exact tables
# show again. About 80 s: run when KEDRO_STREAMING_EVERY_KILL is set, not in
# CI's 45 minutes. Killed after the commit is the plugin's own idempotence.
DURING = pytest.param(
    "during",
    marks=pytest.mark.skipif(
        not os.environ.get("KEDRO_STREAMING_EVERY_KILL"),
        reason="set KEDRO_STREAMING_EVERY_KILL=1 to kill a run during a MERGE too",
    ),
)


@pytest.mark.parametrize("point", [DURING, "after"])
def test_a_run_killed_at_a_merge_then_run_again_keeps_the_tables_exact(
    spark, tmp_path, monkeypatch, point
):
    files = change_log(seed=3)
    events = tmp_path / "events"
    events.mkdir()
    for number, changes in enumerate(files):
        (events / f"{number}.json").write_text(
            "\n".join(map(debezium_event, changes)) + "\n"
        )
    root = Path(__file__).parents[2]
    killed = subprocess.run(
        [sys.executable, "-c", KILLED, str(tmp_path), point],
        cwd=tmp_path,  # its progress log in tmp_path/data/streams
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert killed.returncode == -9, killed.stderr[-3000:]
    customers = tmp_path / "customers"
    made = commits(customers)
    written = {p.name for p in customers.glob("*.parquet")}
    done = {c["batch"] for c in made}
    assert not (tmp_path / "checkpoints/customers/commits/1").exists()
    if point == "during":  # files of the MERGE written, none committed
        assert 1 not in done
        assert written - set().union(*(c["added"] for c in made))
    else:
        assert 1 in done

    monkeypatch.chdir(tmp_path)
    cdc_run(cdc_catalog(tmp_path, files_per_batch=1))

    every = [c for f in files for c in f]
    assert table(spark, str(customers), 1, "_lsn") == replay_type1(every)
    history = table(spark, str(tmp_path / "customer_history"), 2, "_lsn")
    assert history == replay_type2(every, ("name", "city"))
    # Created, then one commit per micro-batch: none applied twice.
    assert [c["batch"] for c in commits(customers)] == [None, 0, 1]
