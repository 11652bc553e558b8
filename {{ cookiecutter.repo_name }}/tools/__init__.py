"""Development tools of this project: a local Kafka broker and the example trips.

Run from the project root: ``python -m tools --help``. Neither the pipelines
nor the streaming runtime import them.
"""
