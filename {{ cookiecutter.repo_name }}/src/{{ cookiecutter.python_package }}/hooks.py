"""The project's hooks: kedro-streaming's, and any of your own.

``SparkHooks`` reads ``spark.yml`` and starts the SparkSession when a pipeline
runs; ``StreamingQueryHooks`` runs the life of the streaming queries the
pipelines start (checks before start, progress log, metrics, clean stop).
"""

from kedro_streaming import SparkHooks, StreamingQueryHooks

HOOKS = (SparkHooks(), StreamingQueryHooks())
