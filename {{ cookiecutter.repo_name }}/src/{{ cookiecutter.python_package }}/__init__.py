"""{{ cookiecutter.project_name }}: a Kedro project on Spark Structured Streaming."""

__version__ = "0.1"
