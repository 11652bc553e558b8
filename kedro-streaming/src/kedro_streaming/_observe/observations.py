"""The expectation figures of a fan-out, counted once: two queries built
from one node's DataFrame observe the same metrics, and the first reports
them."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kedro_streaming._connectors.base import ROWS_READ_METRIC
from kedro_streaming._connectors.files import source_position
from kedro_streaming._observe.progress import ProgressLog
from kedro_streaming._spark import plan_nodes

# The hooks' lines: projects' logging.yml may set this logger's level.
logger = logging.getLogger("kedro_streaming.queries")


class SharedObservations:
    """Each observed metric of a run, and the query that reports it."""

    def __init__(self) -> None:
        # (name, DataFrame id) -> the query that reports it.
        self._observed_by: dict[tuple[str, int], str] = {}

    def report_once(
        self,
        name: str,
        data: Any,
        progress: ProgressLog,
        checkpoint: Callable[[str], str | None],
    ) -> None:
        """Leaves a metric an earlier query observes (one node's DataFrame,
        fanned out to two sinks) to that query: counted once."""
        repeated = {}
        for observation in observed_metrics(data):
            first = self._observed_by.setdefault(observation, name)
            if first == name:
                continue
            # Counted once only where both queries read the same records: a
            # query whose checkpoint stands elsewhere reads others.
            if source_position(checkpoint(name)) != source_position(checkpoint(first)):
                logger.info(
                    "'%s' runs the same checks as %s, from another position in "
                    "their sources (its checkpoint is not at the same offsets): "
                    "it reports its own figures.",
                    name,
                    first,
                )
                continue
            repeated[observation[0]] = first
        if repeated:
            progress.leave_to(name, set(repeated))
            logger.info(
                "'%s' runs the same checks as %s before it (fan-out): their "
                "figures (%s) are reported under %s only.",
                name,
                ", ".join(sorted(set(repeated.values()))),
                ", ".join(sorted(repeated)),
                ", ".join(sorted(set(repeated.values()))),
            )


def observed_metrics(frame: Any) -> set[tuple[str, int]]:
    """The metrics ``frame``'s plan observes, as (name, DataFrame id); empty
    over Spark Connect."""
    jdf = getattr(frame, "_jdf", None)
    if jdf is None:
        return set()
    # Each query counts the rows it reads itself, fan-out or not.
    return {
        (node.name(), node.dataframeId())
        for node in plan_nodes(jdf.queryExecution().logical())
        if node.nodeName() == "CollectMetrics"
        and node.name().split(":")[0] != ROWS_READ_METRIC
    }
