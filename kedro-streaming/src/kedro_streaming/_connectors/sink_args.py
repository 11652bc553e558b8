"""A sink's ``save_args``: the plugin's keys, read once, and what they lack."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kedro_streaming._connectors.delta import DELTA_FORMAT
from kedro_streaming._connectors.files import APPEND_ONLY_FORMATS

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
            trigger=save.pop("trigger", None),
            query_name=save.pop("query_name", None),
            writer_options=save,
        )

    @property
    def real_time(self) -> bool:
        """Whether the query runs in Real-Time Mode (a ``realTime`` trigger)."""
        return isinstance(self.trigger, dict) and REAL_TIME in self.trigger

    def problems(self, file_format: str, path: str | None) -> list[str]:
        """What keeps a sink of ``file_format`` at ``path`` from being saved."""
        problems = []
        if not self.checkpoint:
            problems.append(
                "has no checkpoint: add a folder of its own to its save_args, "
                "beside the other sinks' checkpoints (a new project's catalog has "
                "`checkpoint: ${globals:output_root}/checkpoints/<the sink's name>`), "
                "so that a restart resumes where it stopped"
            )
        problems += self._output_mode_problems(file_format)
        if self.merge_on is not None and (
            file_format != DELTA_FORMAT
            or not path
            or self.foreach_batch
            or not self.merge_on
            or not all(isinstance(key, str) for key in self.merge_on)
        ):
            problems.append(
                "has merge_on, which upserts into a Delta table: give it "
                "`file_format: delta`, a filepath, no foreach_batch, and the key "
                "columns as a list, e.g. `merge_on: [window_start, pickup_borough]`"
            )
        if self.trigger is not None and (
            not isinstance(self.trigger, dict)
            or len(self.trigger) != 1
            or next(iter(self.trigger)) not in TRIGGER_KINDS
        ):
            problems.append(
                f"has trigger {self.trigger!r}: use one of "
                + ", ".join(f"'{kind}: ...'" for kind in TRIGGER_KINDS)
            )
        if self.real_time and (
            self.output_mode != "update" or file_format != "kafka" or self.foreach_batch
        ):
            problems.append(
                "runs in Real-Time Mode (trigger realTime), which writes to Kafka "
                "in output mode update only: set `file_format: kafka` and "
                "`output_mode: update`, or give it a processingTime trigger"
            )
        if not file_format and not self.foreach_batch:
            problems.append("has no file_format: set e.g. `file_format: parquet`")
        return problems

    def _output_mode_problems(self, file_format: str) -> list[str]:
        if self.output_mode not in OUTPUT_MODES:
            return [
                f"has output_mode '{self.output_mode}': use one of "
                f"{', '.join(OUTPUT_MODES)}"
            ]
        if (
            file_format in (*APPEND_ONLY_FORMATS, DELTA_FORMAT)
            and self.output_mode != "append"
            and not self.foreach_batch
            and not self.merge_on
        ):
            return [
                f"has output_mode '{self.output_mode}', which a {file_format} "
                "sink does not support (it only appends): use append, with a "
                "watermark before any aggregation, or a sink that can update "
                "(kafka, foreach_batch, or delta with merge_on)"
            ]
        return []
