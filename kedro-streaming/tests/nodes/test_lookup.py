import datetime

import pytest
from kedro_streaming import Lookup, StreamingConfigError
from kedro_streaming._nodes import lookup as lookup_module
from pyspark.sql import functions as F

ZONES = [
    (1, "EWR", "Newark Airport", 1.5, datetime.date(2024, 1, 31)),
    (2, "Queens", "Jamaica Bay", None, None),
    (7, "Manhattan", "it's \\ a 'quoted' \"zone\" ü ✓", -0.25, None),
    (None, "Unknown", "NV", None, None),
]
SCHEMA = "LocationID INT, Borough STRING, Zone STRING, rate DOUBLE, since DATE"


@pytest.mark.parametrize(
    ("spread", "literal"),
    [
        # IDs close together: an array from the lowest, indexed by key.
        (1, "[EWR,Queens,null,null,null,null,Manhattan]"),
        # Far apart: a map, searched key by key.
        (1000, "map(keys: [1000,2000,7000], values: [EWR,Queens,Manhattan])"),
    ],
    ids=["close-keys-array", "sparse-keys-map"],
)
def test_each_key_finds_its_row_as_a_left_join_would(spark, spread, literal):
    spread_out = [(k * spread if k else k, *rest) for k, *rest in ZONES]
    zones = spark.createDataFrame(spread_out, SCHEMA)
    ids = [(k * spread,) for k in (1, 7, 2, 99)] + [(3 * spread,), (-5,), (None,)]
    trips = spark.createDataFrame(ids, "id INT")
    lookup = Lookup(zones, key="LocationID")

    found = trips.select(
        "id",
        lookup.has(F.col("id")).alias("known"),
        *[
            lookup.value(c, F.col("id")).alias(c)
            for c in ("Borough", "Zone", "rate", "since")
        ],
    )

    assert len(lookup) == 3  # the row without a key is left out
    assert found.schema["since"].dataType.simpleString() == "date"
    assert sorted(found.collect(), key=lambda r: (r.id is None, r.id)) == [
        (-5, False, None, None, None, None),
        (1 * spread, True, "EWR", "Newark Airport", 1.5, datetime.date(2024, 1, 31)),
        (2 * spread, True, "Queens", "Jamaica Bay", None, None),
        (3 * spread, False, None, None, None, None),
        (7 * spread, True, "Manhattan", "it's \\ a 'quoted' \"zone\" ü ✓", -0.25, None),
        (99 * spread, False, None, None, None, None),
        (None, None, None, None, None, None),
    ]
    joined = trips.join(
        zones.withColumnRenamed("LocationID", "id"), "id", "left"
    ).select("id", "Borough", "Zone", "rate", "since")
    assert sorted(found.drop("known").collect(), key=str) == sorted(
        joined.collect(), key=str
    )
    # No join, no broadcast: the rows are literals in the plan, their text
    # read once by the optimizer, not per row.
    plan = found._jdf.queryExecution().executedPlan().toString()
    assert "Join" not in plan
    assert "Broadcast" not in plan
    assert "from_json" not in plan
    assert literal in plan


def test_the_same_on_a_stream(stream_test, spark):
    def boroughs(trips, zones):
        lookup = Lookup(zones, key="LocationID")
        return trips.select("id", lookup.value("Borough", F.col("id")).alias("b"))

    test = stream_test(
        boroughs,
        streams={"trips": "id INT"},
        static={"zones": spark.createDataFrame(ZONES, SCHEMA)},
    )
    step = test.step(trips=[{"id": 1}, {"id": 99}, {"id": None}])
    assert [tuple(row) for row in step.rows] == [(None, None), (1, "EWR"), (99, None)]


def test_what_a_lookup_cannot_hold_is_refused(spark, monkeypatch):
    twice = spark.createDataFrame([(1, "a"), (1, "b")], "k INT, v STRING")
    with pytest.raises(StreamingConfigError) as error:
        Lookup(twice, key="k")
    assert str(error.value) == (
        "Lookup by 'k': two different rows have k 1: {'k': 1, 'v': 'a'} and "
        "{'k': 1, 'v': 'b'}; a lookup finds one row per key."
    )
    assert len(Lookup(twice.limit(1).union(twice.limit(1)), key="k")) == 1

    monkeypatch.setattr(lookup_module, "MAX_ROWS", 1)
    with pytest.raises(StreamingConfigError, match="more than 1 rows; join it instead"):
        Lookup(twice, key="k")
    monkeypatch.undo()

    stamped = spark.createDataFrame(
        [(1, datetime.datetime(2024, 1, 1))], "k INT, at TIMESTAMP"
    )
    with pytest.raises(StreamingConfigError, match="not timestamp; join the table"):
        Lookup(stamped, key="k").value("at", F.col("k"))
    with pytest.raises(
        StreamingConfigError, match="no column 'when'; its columns: k, at"
    ):
        Lookup(stamped, key="k").value("when", F.col("k"))


def test_a_run_reads_each_table_once(spark, tmp_path):
    """In a run, a node built twice (the checks, then the run) or two nodes
    looking up the same table read it once; outside a run, every time."""
    path = tmp_path / "zones.csv"

    def zones(columns=("LocationID", "Borough")):
        table = spark.read.csv(str(path), header=True, schema=SCHEMA)
        return Lookup(table.select(*columns), key="LocationID")

    def boroughs(lookup):
        return [lookup.value("Borough", F.lit(k)) for k in (1, 2)]

    def found(lookup):
        return tuple(spark.range(1).select(*boroughs(lookup)).first())

    path.write_text("LocationID,Borough\n1,EWR\n2,Queens\n")
    end_run = lookup_module.run_reads_each_table_once()
    try:
        before = zones()
        path.write_text("LocationID,Borough\n1,Bronx\n2,Brooklyn\n")
        again, other_plan = zones(), zones(("LocationID", "Borough", "Zone"))
    finally:
        end_run()
    after = zones()

    assert [found(x) for x in (before, again, other_plan, after)] == [
        ("EWR", "Queens"),
        ("EWR", "Queens"),  # the run's first read
        ("Bronx", "Brooklyn"),  # another plan: read on its own
        ("Bronx", "Brooklyn"),  # no run: read anew
    ]
