"""Spark's warning for a timer deleted twice: one line a run, not one a timer.

Spark deletes a Python ``StatefulProcessor``'s timer once its
``handleExpiredTimer`` returns. A processor that deletes that timer itself
as it fires (``for t in handle.listTimers(): handle.deleteTimer(t)`` while
it clears its state) has Spark's own delete find nothing, and Spark's
``TimerStateImpl`` logs a warning, through log4j, for every timer that fires:
``WARN TimerStateImpl: Failed to delete timer for key=[o17] and
timestamp=1709289300000 ms since it does not exist``, about 2,800 lines for
a run of the alerts that issue 67 needed. Nothing is wrong: the timer is
gone either way. While a run's queries run, those warnings are counted in
the driver's JVM instead of printed (a log4j logger of their own for that
class: its other lines are printed as before), and the run says once what
they were. The driver's JVM only: on a cluster, each executor's log keeps
Spark's lines (a local run's executor is the driver's JVM).
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
    """Spark's warnings for a missing timer deleted, counted for one run.

    ``count_deleted_timer_warnings`` starts counting; ``say_once`` logs one
    line the first time there are some; ``stop`` has Spark print them again.
    """

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
    """Counts Spark's warnings for a missing timer deleted, in the JVM of the
    run's session, until ``stop``; ``None`` over Spark Connect (the
    server's log has them)."""
    jvm = jvm_of(spark)
    if jvm is None:
        return None
    warnings = DeletedTimerWarnings(jvm)
    warnings.start()
    return warnings
