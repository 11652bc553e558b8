"""One node's query (`in` -> node -> `out`) run or checked as `kedro run`
and `kedro streams validate` do, for the tests of what a run resumes."""

import json

from kedro.io import DataCatalog
from kedro.pipeline import node, pipeline
from kedro_streaming._checks.plans import build_plans
from kedro_streaming._checks.spec import RunSpec
from kedro_streaming._run.hooks import StreamingQueryHooks


def catalog_of(  # noqa: PLR0913 (the entries' parts)
    tmp_path,
    schema: str,
    *,
    sources=("in",),
    out="out",
    out_format="parquet",
    **save_args,
) -> DataCatalog:
    """JSON landing folders (`in` by default) and a parquet sink `out` (in
    the folder ``out``, with ``save_args``; ``out_format``), as a new run's."""
    entries = {
        source: {
            "type": "kedro_streaming.SparkStreamingDataset",
            "filepath": str(tmp_path / source),
            "file_format": "json",
            "load_args": {"schema": schema},
        }
        for source in sources
    }
    entries["out"] = {
        "type": "kedro_streaming.SparkStreamingDataset",
        "filepath": str(tmp_path / out),
        "file_format": out_format,
        "save_args": {"checkpoint": str(tmp_path / "checkpoint"), **save_args},
    }
    return DataCatalog.from_config(entries)


def kedro_run(tmp_path, schema: str, function, **catalog) -> DataCatalog:
    """One bounded run of `in -> function -> out` through the hooks, as
    `kedro run --params trigger=available_now` drives them; ``catalog``:
    as ``catalog_of`` takes it (a node of two sources reads both)."""
    sources = catalog.get("sources", ("in",))
    catalog = catalog_of(tmp_path, schema, **catalog)
    hooks = StreamingQueryHooks()
    settings = {"trigger": "available_now", "state_dir": str(tmp_path / "streams")}
    hooks.after_context_created(
        type("Context", (), {"config_loader": {"streaming": settings}})()
    )
    nodes = one_node(function, sources)
    hooks.before_pipeline_run({}, nodes, catalog)
    try:
        data = function(*(catalog.load(source) for source in sources))
        hooks.before_dataset_saved("out", data, nodes.nodes[0])
    except Exception as error:
        hooks.on_pipeline_error(error, {})
        raise
    hooks.after_pipeline_run({})
    return catalog


def one_node(function, sources=("in",)):
    return pipeline([node(function, list(sources), "out", name="write")])


def dry_run(spark, catalog: DataCatalog, function, sources=("in",)):
    """What `kedro streams validate` (and `kedro run`, before any query
    starts) finds: its notes and problems."""
    plans = build_plans(spark, RunSpec.read(catalog, one_node(function, sources), {}))
    return plans.notes, plans.problems


def verdict_of(spark, catalog: DataCatalog, function, sources=("in",)) -> str:
    """The line `kedro streams validate` prints for the query of `out`."""
    plans = build_plans(spark, RunSpec.read(catalog, one_node(function, sources), {}))
    return plans.verdicts["out"].describe("out")


def land(tmp_path, name: str, records: list[dict], folder: str = "in") -> None:
    (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    (tmp_path / folder / name).write_text(
        "".join(json.dumps(record) + "\n" for record in records)
    )


def files_of(*folders) -> dict[str, int]:
    """Every file below the folders, with its size and modification time."""
    return {
        str(path): (path.stat().st_size, path.stat().st_mtime_ns)
        for folder in folders
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }
