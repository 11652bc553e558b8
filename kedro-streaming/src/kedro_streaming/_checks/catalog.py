"""A run's catalog and pipeline read together: the streaming datasets, the
nodes and sources of each query, and what the catalog lacks (in this
environment or another)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from kedro.io import DataCatalog, MemoryDataset
from kedro.pipeline import Pipeline

from kedro_streaming._dataset import SparkStreamingDataset
from kedro_streaming._table import SparkDataset
from kedro_streaming.errors import StreamingConfigError
from kedro_streaming.problems import TYPO, closest, did_you_mean

# The checks' logger, as named before 0.7.0.
logger = logging.getLogger("kedro_streaming.checks")


def check_streams_have_sinks(
    catalog: DataCatalog,
    pipeline: Pipeline,
    streaming: dict[str, SparkStreamingDataset],
    other_envs=dict,
) -> None:
    """Fails when a stream would end in no sink: an undeclared output that
    Kedro keeps in memory, so its query never starts."""
    if not streaming:
        return
    downstream = pipeline.from_inputs(*streaming).all_outputs()
    lost = sorted(
        name for name in pipeline.outputs() & downstream if not _declared(catalog, name)
    )
    if lost:
        envs = sorted(
            env
            for env, names in other_envs().items()
            if all(name in names for name in lost)
        )
        where = (
            " or ".join(f"`kedro run --env {env}`" for env in envs)
            if envs
            else "`kedro run --env <env>`"
        )
        raise StreamingConfigError(
            "No sink for "
            + ", ".join(f"'{name}'" for name in lost)
            + ": this environment's catalog does not declare "
            + ("them" if len(lost) > 1 else "it")
            + ", so the stream would stay in memory and never run. Declare a "
            "streaming sink in conf/<env>/catalog.yml, or run with the environment "
            f"that declares one ({where})."
        )


def _declared(catalog: DataCatalog, name: str) -> bool:
    return name in catalog and not isinstance(catalog[name], MemoryDataset)


def check_entries_named_as_used(
    catalog: DataCatalog, pipeline: Pipeline, used_elsewhere: set[str] | None = None
) -> None:
    """Fails on a misspelt streaming entry: the pipeline uses an undeclared
    dataset close to an entry no pipeline uses (Kedro would keep it in memory).
    ``used_elsewhere``: other pipelines' datasets (default: ``all_pipelines``).
    """
    used = pipeline.datasets()
    undeclared = sorted(
        name
        for name in used
        if not name.startswith("params:") and name != "parameters"
        if name not in catalog or isinstance(catalog.get(name), MemoryDataset)
    )
    unused = [
        name
        for name in catalog.keys()  # noqa: SIM118 (Kedro's catalog)
        if name not in used and "kedro_streaming" in str(catalog.get_type(name) or "")
    ]
    lines = []
    for name in undeclared:
        close = closest(name, unused, cutoff=TYPO)
        if close and used_elsewhere is None:  # read only when it may matter
            used_elsewhere = set().union(
                *(each.datasets() for each in all_pipelines().values())
            )
        if close and close[0] not in (used_elsewhere or set()):
            lines.append(
                f"the pipeline uses '{name}', which the catalog does not declare, "
                f"and the catalog declares '{close[0]}', which no pipeline uses: "
                f"rename the entry '{close[0]}' to '{name}' (or the node's dataset "
                f"to '{close[0]}'); as it is, Kedro would keep '{name}' in memory "
                "and never write it"
            )
    if lines:
        raise StreamingConfigError(
            "A catalog entry's name is not the pipeline's:\n  - " + "\n  - ".join(lines)
        )


def all_pipelines() -> dict[str, Pipeline]:
    """Every pipeline of the project, whatever ``--pipelines``; none outside one."""
    try:
        from kedro.framework.project import find_pipelines, pipelines  # noqa: PLC0415
    except ImportError:
        return {}
    # `kedro run --pipelines` has find_pipelines find those only (Kedro 1.x).
    requested = getattr(pipelines, "_requested_pipelines", None)
    try:
        if requested is not None:
            pipelines._requested_pipelines = None
        return find_pipelines()
    except Exception:  # noqa: BLE001 (no project configured: none)
        return {}
    finally:
        if requested is not None:
            pipelines._requested_pipelines = requested


def check_paths_reach_the_cluster(
    paths: dict[str, list[str]], where: str, env: str | None = None
) -> None:
    """Fails on relative paths when Spark does not run in this process: a
    cluster or Spark Connect server resolves them against its own folder."""
    relative = _relative(paths)
    if relative:
        raise StreamingConfigError(
            f"Spark runs on {where}, which does not see this process's relative "
            "paths:\n  - " + "\n  - ".join(relative) + "\nSet input_root and "
            f"output_root in conf/{env or '<env>'}/globals.yml to storage that the "
            "driver and every executor see: hdfs://, s3a://, abfss://, gs://, or "
            "an absolute path on a shared mount."
        )


def check_paths_resolve_in_the_project(
    paths: dict[str, list[str]], project_path: Path | None
) -> None:
    """Fails on relative paths when the run's folder is not the project's:
    Kedro makes ``filepath`` the project's, but Spark resolves checkpoints
    (and ``state_dir``) here, so streams would start afresh."""
    here = Path.cwd().resolve()
    project = Path(project_path).resolve() if project_path is not None else here
    relative = _relative(paths) if here != project else []
    if relative:
        raise StreamingConfigError(
            f"This command runs in {here}, not in the project's folder "
            f"{project}, so these relative paths would be resolved here: new "
            "checkpoints, every source read again from the start:\n  - "
            + "\n  - ".join(relative)
            + f"\nRun it from {project}, or make the paths absolute "
            "(input_root and output_root in conf/<env>/globals.yml)."
        )


def _relative(paths: dict[str, list[str]]) -> list[str]:
    """``'name': 'path'`` for each local path of ``paths`` that is relative."""
    return [
        f"'{name}': '{path}'"
        for name, named_paths in sorted(paths.items())
        for path in named_paths
        if path and "://" not in path and not path.startswith(("/", "file:"))
    ]


def check_catalog_has(catalog: DataCatalog, pipeline: Pipeline, other_envs) -> None:
    """Fails on a pipeline input the run's catalog lacks, naming the
    environments that declare it (Kedro would fail later, naming none)."""
    missing = sorted(name for name in pipeline.inputs() if name not in catalog)
    if not missing:
        return
    lines, declared = [], other_envs()
    known = [key for key in catalog.keys() if key.startswith("params:")]  # noqa: SIM118
    for name in [n for n in missing if n.startswith("params:")]:
        fix = did_you_mean(name, known)
        lines.append(
            f"'{name}': no parameter {name.removeprefix('params:')} in "
            "conf/<env>/parameters*.yml" + (f": {fix}" if fix else "")
        )
    missing = [n for n in missing if not n.startswith("params:")]
    for name in missing:
        envs = sorted(env for env, names in declared.items() if name in names)
        lines.append(
            f"'{name}': declared in "
            + " and ".join(f"conf/{env}/catalog.yml" for env in envs)
            + ": run with "
            + " or ".join(f"`--env {env}`" for env in envs)
            if envs
            else f"'{name}': no environment declares it: add it to "
            "conf/base/catalog.yml (or the environment's catalog.yml)"
        )
    raise StreamingConfigError(
        "The pipeline reads what this environment does not declare:\n  - "
        + "\n  - ".join(lines)
    )


def catalog_names_by_env(config_loader) -> dict[str, Any]:
    """The dataset names (and factory patterns) each other environment's
    catalog declares, by environment."""
    from kedro.io.catalog_config_resolver import CatalogConfigResolver  # noqa: PLC0415

    found = {}
    env = config_loader.env
    root = Path(str(config_loader.conf_source))
    for folder in (
        sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    ):
        if folder.name in ("base", env) or not any(folder.glob("catalog*")):
            continue
        try:
            config = loader_like(config_loader, env=folder.name)["catalog"]
        except Exception as error:  # noqa: BLE001 (another env's broken conf)
            logger.debug("conf/%s's catalog not read: %s", folder.name, error)
            continue
        found[folder.name] = _Declared(config, CatalogConfigResolver)
    return found


def loader_like(config_loader, **changes: Any):
    """A configuration loader as the project's settings make one, like
    ``config_loader`` but for ``changes``."""
    from kedro.framework.project import settings  # noqa: PLC0415

    arguments = {
        "conf_source": str(config_loader.conf_source),
        "env": config_loader.env,
        "runtime_params": config_loader.runtime_params,
        **changes,
    }
    return settings.CONFIG_LOADER_CLASS(**arguments, **settings.CONFIG_LOADER_ARGS)


class _Declared:
    """The names an environment's catalog declares, patterns included."""

    def __init__(self, config: dict[str, Any], resolver_class) -> None:
        self._names = {k for k in config if not k.startswith("_")}
        self._patterns = [k for k in self._names if resolver_class.is_pattern(k)]

    def __contains__(self, name: str) -> bool:
        from parse import parse  # noqa: PLC0415 (Kedro's own pattern matcher)

        return name in self._names or any(parse(p, name) for p in self._patterns)


def streaming_datasets(
    catalog: DataCatalog, names: set[str]
) -> dict[str, SparkStreamingDataset]:
    datasets = {name: catalog[name] for name in sorted(names) if name in catalog}
    found = {
        name: each
        for name, each in datasets.items()
        if isinstance(each, SparkStreamingDataset)
    }
    for name, each in found.items():
        each.catalog_name = name
    return found


def query_sources(
    catalog: DataCatalog, pipeline: Pipeline, sink: str
) -> dict[str, SparkStreamingDataset]:
    """The streaming datasets the sink's query reads, back through memory."""
    producers = {output: node for node in pipeline.nodes for output in node.outputs}
    sources, stack, seen = {}, [sink], set()
    while stack:
        node = producers.get(stack.pop())
        if node is None or node.name in seen:
            continue
        seen.add(node.name)
        for name in node.inputs:
            dataset = catalog[name] if name in catalog else None
            if isinstance(dataset, SparkStreamingDataset):
                sources[name] = dataset
            else:
                stack.append(name)
    return sources


def query_nodes(catalog: DataCatalog, pipeline: Pipeline, sink: str) -> list[str]:
    """The nodes a sink's query runs, back through memory to streaming datasets."""
    producers = {output: node for node in pipeline.nodes for output in node.outputs}
    found, stack = [], [sink]
    while stack:
        node = producers.get(stack.pop())
        if node is None or node.name in found:
            continue
        found.append(node.name)
        stack.extend(
            name
            for name in node.inputs
            if not isinstance(
                catalog[name] if name in catalog else None, SparkStreamingDataset
            )
        )
    return found


def fan_out(catalog: DataCatalog, pipeline: Pipeline, sinks: list[str]) -> list[str]:
    """Says which queries each read the same sources through the same nodes,
    so the source is read and every record checked once per query."""
    nodes = {sink: query_nodes(catalog, pipeline, sink) for sink in sinks}
    groups: dict[tuple[str, ...], list[str]] = {}
    for sink in sinks:
        for other in sinks:
            shared = tuple(n for n in reversed(nodes[sink]) if n in nodes[other])
            if other > sink and shared:
                groups.setdefault(shared, []).extend([sink, other])
    lines = []
    for shared, pairs in groups.items():
        queries = sorted(set(pairs))
        sources = sorted(
            set().union(*(query_sources(catalog, pipeline, q) for q in queries))
            & set(
                name
                for node in pipeline.nodes
                if node.name in shared
                for name in node.inputs
            )
        )
        lines.append(
            f"queries {', '.join(queries)} each read {', '.join(sources) or 'their sources'} "
            f"and run {', '.join(shared)} on their own: {len(queries)} reads of the "
            "source and checks of every record. To read and check once, write the "
            "shared output to a sink and read that sink (docs/operating.md, "
            '"One source, several sinks")'
        )
    return lines


def dataset_paths(catalog: DataCatalog, names: set[str]) -> dict[str, list[str]]:
    """The folders and checkpoints of the runtime's datasets among ``names``."""
    paths = {}
    for name in names:
        dataset = catalog[name] if name in catalog else None
        if isinstance(dataset, SparkStreamingDataset):
            paths[name] = [p for p in (dataset.path, dataset.checkpoint) if p]
        elif isinstance(dataset, SparkDataset):
            paths[name] = [dataset.path]
    return paths
