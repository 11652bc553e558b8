"""Static Spark tables beside the streams, on the project's session."""

from __future__ import annotations

from typing import Any

from kedro_datasets.spark import SparkDataset as _KedroSparkDataset
from pyspark.sql import DataFrame

from kedro_streaming._session.session import spark_session


class SparkDataset(_KedroSparkDataset):
    """kedro-datasets' ``spark.SparkDataset``, on the project's SparkSession.

    Loading or saving starts the session from ``spark.yml`` if nothing has yet,
    as in ``kedro ipython``, where no pipeline runs.

    Example:
        ```yaml
        taxi_zones:
          type: kedro_streaming.SparkDataset
          filepath: data/01_raw/taxi_zone_lookup.csv
          file_format: csv
          load_args:
            header: true
            schema: "LocationID INT, Borough STRING, Zone STRING"
        ```
    """

    def __init__(self, *, filepath: str, **kwargs: Any) -> None:
        super().__init__(filepath=filepath, **kwargs)
        self.path = filepath

    def load(self) -> DataFrame:
        spark_session()
        return super().load()

    def save(self, data: DataFrame) -> None:
        spark_session()
        super().save(data)
