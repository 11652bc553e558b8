"""The driver's planner warmed up while a Real-Time Mode query reads its first
batch, so that the pause at each checkpoint (the next batch planned and its
code generated while records wait) is short from the first one on."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from kedro_streaming._spark import java_frame, jvm_of
from kedro_streaming.errors import StreamingConfigError

logger = logging.getLogger("kedro_streaming.queries")


class PlannerWarmUp:
    """Plans a running query's DataFrame up to ``times`` times in the
    background, from ``after`` seconds after its start until nine tenths of
    its checkpoint interval: the JIT then compiles the planner's code as
    the query's own checkpoints use it, which happens only once per
    checkpoint. Each planning is Spark's ``explain`` of the query (analysis,
    optimization, physical planning; nothing runs), in turn with its code
    generated and as the UI's SQL tab describes each batch's plan.
    Between two, it waits ``gap`` seconds (by default the time left, shared
    out), and at least twice as long as the last took: the warm-up takes at
    most a third of a core from the query.
    """

    def __init__(
        self,
        frame: Any,
        interval_s: float,
        *,
        times: int = 25,
        after: float = 30.0,
        gap: float | None = None,
    ) -> None:
        self._frame = frame
        self._times = times
        self._after = min(after, interval_s / 4)
        self._until = 0.9 * interval_s
        self._gap = (self._until - self._after) / max(times, 1) if gap is None else gap
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        jdf, jvm = java_frame(self._frame), jvm_of(self._frame.sparkSession)
        if jdf is None or jvm is None or self._times <= 0:  # Spark Connect
            return
        self._thread = threading.Thread(
            target=self._run, args=(jdf, jvm), name="planner-warm-up", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self, jdf: Any, jvm: Any) -> None:
        explain = jvm.org.apache.spark.sql.api.python.PythonSQLUtils.explainString
        until = time.monotonic() + self._until
        if self._stop.wait(self._after):
            return
        # Each batch's plan is also described for the UI's SQL tab, in this mode.
        ui_mode = self._frame.sparkSession.conf.get(
            "spark.sql.ui.explainMode", "formatted"
        )
        started, done = time.monotonic(), 0
        try:
            while done < self._times:
                began = time.monotonic()
                mode = "codegen" if done % 2 == 0 else ui_mode
                explain(jdf.alias("_warm_up").queryExecution(), mode)
                done += 1
                wait = max(self._gap, 2 * (time.monotonic() - began))
                if time.monotonic() + wait > until or self._stop.wait(wait):
                    break
        except Exception as error:  # noqa: BLE001 (the run is ending)
            logger.debug("Planner warm-up ended: %s", error)
        logger.info(
            "Planner warmed up for the checkpoints: %d plannings in %.1f s.",
            done,
            time.monotonic() - started,
        )


def planner_warm_up(settings: dict[str, Any]) -> int:
    """``realtime_planner_warm_up`` of ``streaming.yml``: how many times a
    Real-Time Mode query is planned in the background before its first
    checkpoint (0: never).

    Example:
        >>> planner_warm_up({"realtime_planner_warm_up": "25"})
        25
        >>> planner_warm_up({})
        0

    Raises:
        StreamingConfigError: It is not a whole number, 0 or more.
    """
    value = settings.get("realtime_planner_warm_up", 0)
    try:
        times = int(str(value))
    except ValueError:
        times = -1
    if times < 0:
        raise StreamingConfigError(
            f"realtime_planner_warm_up '{value}' (streaming.yml, or --params) is "
            "not a number of plannings: set a whole number, e.g. 25, or 0 for none."
        )
    return times
