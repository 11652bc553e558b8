"""The dry run that builds every query of a run before any starts."""

from pathlib import Path

from kedro.io import DataCatalog
from kedro.pipeline import node, pipeline
from kedro_streaming._checks.plans import build_plans
from kedro_streaming._checks.spec import RunSpec

from tests.helpers import SOURCE, sink_in

# Every kind of column a sink's stand-in must copy, and names that need quoting.
WIDE = (
    "id",
    "CAST(id AS DECIMAL(10, 2)) AS `fare.amount`",
    "TIMESTAMP'2026-11-30 12:00:00' AS `picked up`",
    "DATE'2026-11-30' AS day",
    "CAST('ab' AS BINARY) AS payload",
    "array(named_struct('k', 'v', 'n', id)) AS tags",
    "map('zone', id) AS zones",
    "named_struct('inner', named_struct('deep', 1.5D)) AS nested",
)


def test_a_sink_read_before_it_has_history_is_a_stream_with_its_columns(spark):
    """The dry run gives a node that reads a sink of the same run, which has
    nothing written yet, a stream with exactly that sink's columns: the node's
    own plan is built and checked on them."""
    here = Path.cwd()
    (here / "in" / "0.json").write_text('{"id": 1}\n')
    catalog = DataCatalog.from_config(
        {
            "in": {**SOURCE, "filepath": str(here / "in")},
            **{name: sink_in(here, name) for name in ("wide", "copy")},
        }
    )
    given = []

    def copied(frame):
        given.append(frame)
        return frame.select("*")

    nodes = pipeline(
        [
            node(lambda frame: frame.selectExpr(*WIDE), "in", "wide", name="widen"),
            node(copied, "wide", "copy", name="copied"),
        ]
    )
    plans = build_plans(spark, RunSpec.read(catalog, nodes, {}))

    assert plans.problems == []
    assert (plans.stand_ins, sorted(plans.frames)) == ({"copy"}, ["copy", "wide"])
    [stand_in] = given
    assert stand_in.isStreaming
    assert stand_in.schema.simpleString() == (
        plans.frames["wide"].schema.simpleString()
    )
    assert [(f.name, f.dataType) for f in stand_in.schema.fields] == [
        (f.name, f.dataType) for f in plans.frames["wide"].schema.fields
    ]
    assert not (here / "wide").exists()
