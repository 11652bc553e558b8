"""The example's development tool: taxi trips to land as files or send to Kafka.

Run from the project root: ``python -m tools --help``. The pipelines do not
import it.
"""
