"""The streaming runtime: everything between Kedro and Spark's streaming queries.

``settings.py`` registers its hooks, the catalog names its datasets, and a
node may call ``check_expectations``. It knows nothing of this project, so it
could move into a package of its own unchanged.

- ``SparkStreamingDataset``: a streaming source or sink as a catalog entry.
  ``save()`` starts a query; ``start(data, trigger=..., query_name=...)`` is
  the same with the caller's trigger and name.
- ``SparkDataset``: kedro-datasets' ``spark.SparkDataset`` on the same session.
- ``SparkHooks``: reads ``spark.yml``; the session starts with the first
  pipeline run or dataset load (``spark_session()``), never for
  ``kedro catalog``, ``kedro registry`` or ``kedro viz``.
- ``check_expectations``: data-quality rules declared in configuration
  (warn, quarantine or fail), checked on every record of a DataFrame and
  counted per rule in every micro-batch.
- ``StreamingQueryHooks``: checks a run before any query starts, starts each
  sink's query with the run's trigger, holds a stream over a sink back until
  the sink has history, logs one progress line per micro-batch, stops the
  queries on Ctrl-C or SIGTERM and fails the run when a query fails.
- ``testing.StreamTest``: for tests, a node or pipeline run on chosen
  micro-batches, with each step's rows, watermark and counts (the
  ``stream_test`` fixture of ``tests/conftest.py``).
"""

from .dataset import SparkDataset, SparkStreamingDataset
from .errors import StreamingConfigError, StreamingQueryFailed
from .expectations import check_expectations
from .queries import StreamingQueryHooks
from .session import SparkHooks, spark_session

__all__ = [
    "SparkDataset",
    "SparkHooks",
    "SparkStreamingDataset",
    "StreamingConfigError",
    "StreamingQueryFailed",
    "StreamingQueryHooks",
    "check_expectations",
    "spark_session",
]
