"""What the streaming runtime raises."""


class StreamingConfigError(ValueError):
    """The run's streaming configuration cannot work; nothing was started.

    Example:
        >>> from kedro_streaming import StreamingConfigError, parse_records
        >>> raw = spark.createDataFrame([('{"device": "d1"}',)], "value STRING")
        >>> try:
        ...     parse_records(raw, "device STRNG")
        ... except StreamingConfigError as error:
        ...     print(error)
        The record schema 'device STRNG' is not Spark SQL DDL: ...
    """


class StreamingQueryFailed(RuntimeError):
    """A streaming query of the run stopped with an error.

    Example:
        ```python
        from pathlib import Path

        from kedro.framework.session import KedroSession
        from kedro.framework.startup import bootstrap_project
        from kedro_streaming import StreamingQueryFailed

        bootstrap_project(Path.cwd())  # a script at the project's root
        with KedroSession.create(env="kafka") as session:
            try:
                session.run(pipeline_names=["ingest"])
            except StreamingQueryFailed as failed:
                print(failed)  # the query, its topics, the cause; rerun resumes
        ```
    """
