"""A sink's ``save_args``: the plugin's keys, read once, and what they lack."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kedro_streaming.problems import Problem

if TYPE_CHECKING:
    from kedro_streaming._connectors.base import Connector

OUTPUT_MODES = ("append", "complete", "update")
TRIGGER_KINDS = ("processingTime", "availableNow", "once", "continuous", "realTime")
# Spark's Real-Time Mode (Spark 4.1+): long-running tasks that stream each
# record through; its trigger's interval is how often the query checkpoints.
REAL_TIME = "realTime"


@dataclass
class SinkArgs:
    """The plugin's keys of ``save_args``; ``writer_options`` holds the rest
    (Spark's options).

    Example:
        >>> args = SinkArgs.parse({"checkpoint": "cp", "trigger": {"realTime": "5s"}})
        >>> args.output_mode, args.real_time, args.writer_options
        ('append', True, {})
    """

    output_mode: str = "append"
    checkpoint: str | None = None
    partition_by: str | list[str] | None = None
    foreach_batch: str | None = None
    merge_on: list[str] | None = None
    # A table kept from a change feed (Delta's room reads it: changes.py).
    changes: Any = None
    trigger: dict[str, Any] | None = None
    query_name: str | None = None
    writer_options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, save_args: dict[str, Any]) -> SinkArgs:
        save = dict(save_args)
        merge_on = save.pop("merge_on", None)
        return cls(
            output_mode=save.pop("output_mode", "append"),
            checkpoint=save.pop("checkpoint", None),
            partition_by=save.pop("partitionBy", None),
            foreach_batch=save.pop("foreach_batch", None),
            merge_on=[merge_on] if isinstance(merge_on, str) else merge_on,
            changes=save.pop("changes", None),
            trigger=save.pop("trigger", None),
            query_name=save.pop("query_name", None),
            writer_options=save,
        )

    @property
    def real_time(self) -> bool:
        """Whether the query runs in Real-Time Mode (a ``realTime`` trigger)."""
        return isinstance(self.trigger, dict) and REAL_TIME in self.trigger

    def problems(self, connector: Connector, path: str | None) -> list[Problem]:
        """What keeps a sink of ``connector``'s format at ``path`` from being saved."""
        file_format = connector.file_format
        problems = []
        if not self.checkpoint:
            problems.append(
                Problem(
                    "has no checkpoint",
                    "add a folder of its own to its save_args, beside the other "
                    "sinks' checkpoints (a new project's catalog has `checkpoint: "
                    "${globals:output_root}/checkpoints/<the sink's name>`), so that "
                    "a restart resumes where it stopped",
                    id="SINK_WITHOUT_CHECKPOINT",
                )
            )
        problems += self._output_mode_problems(connector)
        if self.merge_on is not None and (
            not connector.upserts
            or not path
            or self.foreach_batch
            or not self.merge_on
            or not all(isinstance(key, str) for key in self.merge_on)
        ):
            problems.append(
                Problem(
                    "has merge_on, which upserts into a Delta table",
                    "give it `file_format: delta`, a filepath, no foreach_batch, and "
                    "the key columns as a list, e.g. `merge_on: [window_start, "
                    "pickup_borough]`",
                    id="SINK_MERGE_ON_WITHOUT_DELTA",
                )
            )
        if self.changes is not None and (
            not connector.upserts
            or not path
            or self.foreach_batch
            or self.merge_on is not None
        ):
            problems.append(
                Problem(
                    "has changes, which keep a Delta table from a change feed",
                    "give it `file_format: delta`, a filepath, and neither merge_on "
                    "nor foreach_batch (docs/cdc.md)",
                    id="SINK_CHANGES_WITHOUT_DELTA",
                )
            )
        if self.trigger is not None and (
            not isinstance(self.trigger, dict)
            or len(self.trigger) != 1
            or next(iter(self.trigger)) not in TRIGGER_KINDS
        ):
            problems.append(
                Problem(
                    f"has trigger {self.trigger!r}",
                    "use one of "
                    + ", ".join(f"'{kind}: ...'" for kind in TRIGGER_KINDS),
                    id="SINK_TRIGGER_UNKNOWN",
                )
            )
        if self.real_time and (
            self.output_mode != "update"
            or not connector.real_time
            or self.foreach_batch
        ):
            problems.append(
                Problem(
                    "runs in Real-Time Mode (trigger realTime), which writes to Kafka "
                    "in output mode update only",
                    "set `file_format: kafka` and `output_mode: update`, or give it "
                    "a processingTime trigger",
                    id="SINK_REAL_TIME_NOT_KAFKA_UPDATE",
                )
            )
        if not file_format and not self.foreach_batch:
            problems.append(
                Problem(
                    "has no file_format",
                    "set e.g. `file_format: parquet`",
                    id="SINK_WITHOUT_FORMAT",
                )
            )
        return problems

    def _output_mode_problems(self, connector: Connector) -> list[Problem]:
        if self.output_mode not in OUTPUT_MODES:
            return [
                Problem(
                    f"has output_mode '{self.output_mode}'",
                    f"use one of {', '.join(OUTPUT_MODES)}",
                    id="SINK_OUTPUT_MODE_UNKNOWN",
                )
            ]
        if (
            connector.only_appends
            and self.output_mode != "append"
            and not self.foreach_batch
            and not self.merge_on
            and self.changes is None
        ):
            return [
                Problem(
                    f"has output_mode '{self.output_mode}', which a "
                    f"{connector.file_format} sink does not support (it only appends)",
                    "use append, with a watermark before any aggregation, or a sink "
                    "that can update (kafka, foreach_batch, or delta with merge_on)",
                    id="SINK_ONLY_APPENDS",
                )
            ]
        return []
