"""The project's hooks: kedro-streaming's, and any of your own.

``SparkHooks`` reads ``spark.yml`` and starts the SparkSession when a pipeline
runs; ``StreamingQueryHooks`` runs the life of the streaming queries the
pipelines start (checks before start, progress log, metrics, clean stop).
"""

try:
    from kedro_streaming import SparkHooks, StreamingQueryHooks
except ModuleNotFoundError as missing:  # this Python lacks the requirements
    raise ModuleNotFoundError(
        f"{missing.msg}: install the project's requirements into this Python, "
        'from the project\'s folder: pip install -r requirements.txt -e ".[dev]"',
        name=missing.name,
    ) from None

HOOKS = (SparkHooks(), StreamingQueryHooks())
