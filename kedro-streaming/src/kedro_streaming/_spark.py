"""What the runtime reads from Spark beyond PySpark's public API (its private
py4j handles: here and nowhere else), and the first line of Spark's errors.
Over Spark Connect there is no JVM here: the JVM's functions answer ``None``."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from itertools import islice
from typing import Any

import pyspark
from kedro.io.core import DatasetError
from pyspark import SparkContext
from pyspark.logger import PySparkLogger
from pyspark.sql.streaming import DataStreamWriter

# The trigger of Spark's Real-Time Mode (4.1+).
_REAL_TIME = "realTime"


def jvm_of(spark: Any) -> Any | None:
    """The JVM of a classic SparkSession; ``None`` over Spark Connect."""
    return getattr(spark, "_jvm", None)


def java_frame(frame: Any) -> Any | None:
    """The JVM Dataset behind a DataFrame; ``None`` over Spark Connect."""
    return getattr(frame, "_jdf", None)


def plan_nodes(plan: Any) -> Iterator[Any]:
    """Each node of a JVM plan, parents first, children left to right."""
    stack = [plan]
    while stack:
        node = stack.pop()
        yield node
        children = node.children()
        stack += [children.apply(i) for i in reversed(range(children.size()))]


def java_query(query: Any) -> Any | None:
    """The JVM StreamingQuery behind a query; ``None`` over Spark Connect."""
    return getattr(query, "_jsq", None)


def use_gateway(gateway: Any) -> None:
    """Has PySpark use a JVM this process launched itself."""
    SparkContext._ensure_initialized(gateway=gateway)


def gateway_started() -> bool:
    """Whether this process has started a JVM for PySpark."""
    return SparkContext._gateway is not None


def class_loads(spark: Any, name: str) -> bool:
    """Whether the JVM of ``spark`` has the class ``name``."""
    java = jvm_of(spark)
    if java is None:
        return False
    try:
        java.java.lang.Class.forName(
            name, False, java.java.lang.Thread.currentThread().getContextClassLoader()
        )
    except Exception:  # noqa: BLE001 (Py4J wraps ClassNotFoundException)
        return False
    return True


def headline(error: BaseException, limit: int = 1000) -> str:
    """The first line of Spark's message, without the query plan that follows;
    and its cause's, where it only introduces it ("...awaitResult:")."""
    causes = _causes(error)
    text = _first_line(next(causes))
    for cause in causes:
        if not text.endswith(":"):
            break
        text = f"{text} {_first_line(cause)}"
    return text if len(text) <= limit else text[:limit] + "..."


def whole_text(error: BaseException) -> str:
    """Spark's messages of ``error`` and of its causes, with the JVM's stack
    trace where PySpark keeps one: a cause a sink wraps (Delta's
    ``TASK_WRITE_FAILED``) is said there only."""
    return "\n".join(
        part
        for cause in islice(_causes(error), 10)
        for part in (str(cause), getattr(cause, "_stackTrace", None) or "")
    )


def _causes(error: BaseException) -> Iterator[BaseException]:
    """``error``, then its causes: PySpark's (``_cause``) or Python's."""
    cause: BaseException | None = error
    while cause is not None:
        yield cause
        cause = getattr(cause, "_cause", None) or cause.__cause__


def _first_line(error: BaseException) -> str:
    # Without control characters: Spark quotes binary files' bytes (a NUL
    # makes grep call a log binary).
    text = "".join(c if c.isprintable() or c == "\n" else " " for c in str(error))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def with_trigger(writer: DataStreamWriter, trigger: dict[str, Any]) -> DataStreamWriter:
    """``writer.trigger(**trigger)``, Real-Time Mode included on PySpark 4.1,
    whose ``trigger()`` does not take ``realTime``: the JVM writer gets it."""
    interval = trigger.get(_REAL_TIME)
    if interval is None or _REAL_TIME in inspect.signature(writer.trigger).parameters:
        return writer.trigger(**trigger)
    java_writer = getattr(writer, "_jwrite", None)
    if java_writer is None:
        raise DatasetError(
            "Real-Time Mode over Spark Connect needs PySpark 4.2 or later (PySpark "
            f"{pyspark.__version__} cannot ask for it): upgrade the client, or run "
            "with a local or cluster master."
        )
    triggers = SparkContext._jvm.org.apache.spark.sql.streaming.Trigger
    writer._jwrite = java_writer.trigger(triggers.RealTime(str(interval)))
    return writer


# PySpark's loggers of the errors it converts, each with where the DataFrame
# was made and the Java stack (about 22 kB).
_QUERY_CONTEXT_LOGGERS = ("DataFrameQueryContextLogger", "SQLQueryContextLogger")


@contextlib.contextmanager
def pyspark_error_logs_off() -> Iterator[None]:
    """Without PySpark's log of an error's Java stack as it raises it: the
    caller's error says all there is to say."""
    # PySpark's own logger class: a plain one would not take its extra fields.
    loggers = [PySparkLogger.getLogger(name) for name in _QUERY_CONTEXT_LOGGERS]
    before = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    try:
        yield
    finally:
        for logger, disabled in zip(loggers, before, strict=True):
            logger.disabled = disabled
