"""Spark's warning for a timer deleted twice: one line a run, not one a timer.

A ``StatefulProcessor`` that deletes the timer firing in
``handleExpiredTimer`` has Spark's own delete after it find nothing, and
Spark's ``TimerStateImpl`` warn for every timer (2,800 lines for one run).
While a run's queries run, the driver's JVM counts those warnings instead of
printing them (on a cluster, executors' logs keep theirs), and the run says
once what they were.
"""

from __future__ import annotations

import logging
from typing import Any

from kedro_streaming._spark import jvm_of

# Spark's class that logs it: Spark 4.1 and later; Spark 4.0.
TIMER_STATE_LOGGERS = (
    "org.apache.spark.sql.execution.streaming.operators.stateful."
    "transformwithstate.timers.TimerStateImpl",
    "org.apache.spark.sql.execution.streaming.TimerStateImpl",
)
# The start of the warning (what follows names the key and the timer).
DELETED_MISSING = "Failed to delete timer"
_COUNTER = "kedro-streaming-deleted-missing-timers"

# The hooks' lines: projects' logging.yml may set this logger's level.
logger = logging.getLogger("kedro_streaming.queries")


class DeletedTimerWarnings:
    """Spark's warnings for a missing timer deleted, counted for one run."""

    def __init__(self, jvm: Any) -> None:
        self._jvm = jvm
        self._said = False
        self._counter: Any = None
        self._routed: list[str] = []

    def start(self) -> None:
        """Routes that warning of Spark's timer class to a counter."""
        log4j = self._jvm.org.apache.logging.log4j
        core = log4j.core
        context = log4j.LogManager.getContext(False)
        config = context.getConfiguration()
        result = getattr(core, "Filter$Result")

        def matching(on_match: Any, on_mismatch: Any) -> Any:
            builder = core.filter.StringMatchFilter.newBuilder()
            builder = builder.setMatchString(DELETED_MISSING)
            return builder.setOnMatch(on_match).setOnMismatch(on_mismatch).build()

        self._counter = core.appender.CountingNoOpAppender(_COUNTER, None)
        self._counter.start()
        root = config.getRootLogger()
        levels = {ref.getRef(): ref.getLevel() for ref in root.getAppenderRefs()}
        for name in TIMER_STATE_LOGGERS:
            if config.getLoggerConfig(name).getName() == name:
                continue  # the project's log4j2 configuration sets it: its own
            # No level of its own (the root's); not additive: the root's
            # appenders are its own, given every line of it but that one.
            own = core.config.LoggerConfig(name, None, False)
            own.addAppender(self._counter, None, matching(result.ACCEPT, result.DENY))
            for appender_name, appender in root.getAppenders().items():
                own.addAppender(
                    appender,
                    levels.get(appender_name),
                    matching(result.DENY, result.NEUTRAL),
                )
            config.addLogger(name, own)
            self._routed.append(name)
        context.updateLoggers()

    def count(self) -> int:
        """Spark's warnings counted since ``start``."""
        return int(self._counter.getCount()) if self._counter is not None else 0

    def say_once(self) -> None:
        """Logs one line the first time there are some; then nothing."""
        if self._said:
            return
        count = self.count()
        if not count:
            return
        self._said = True
        logger.warning(
            "Spark's warning \"%s for key=[...] and timestamp=... ms since it "
            'does not exist" came %d %s so far, and is not shown in this run: a '
            "transformWithState processor deletes a timer that is not there, most "
            "often the one firing, in handleExpiredTimer, which Spark deletes "
            "itself once the call returns. Nothing is lost; to have none, delete "
            "no timer in handleExpiredTimer (docs/stateful.md).",
            DELETED_MISSING,
            count,
            "time" if count == 1 else "times",
        )

    def stop(self) -> None:
        """Spark's warnings printed again, as before ``start``."""
        if self._counter is None:
            return
        log4j = self._jvm.org.apache.logging.log4j
        context = log4j.LogManager.getContext(False)
        config = context.getConfiguration()
        for name in self._routed:
            config.removeLogger(name)
        context.updateLoggers()
        self._counter.stop()
        self._routed.clear()


def count_deleted_timer_warnings(spark: Any) -> DeletedTimerWarnings | None:
    """Counts those warnings in the session's JVM until ``stop``; ``None``
    over Spark Connect."""
    jvm = jvm_of(spark)
    if jvm is None:
        return None
    warnings = DeletedTimerWarnings(jvm)
    warnings.start()
    return warnings
