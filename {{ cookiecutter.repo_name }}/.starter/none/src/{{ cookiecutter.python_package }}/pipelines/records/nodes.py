"""The records pipeline's nodes: DataFrame in, DataFrame out, the same on
batch and streaming input."""

from typing import Any

from kedro_streaming import check_expectations
from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def check_records(
    parsed_records: DataFrame, record_expectations: dict[str, Any]
) -> DataFrame:
    """Checks each parsed record against the declared expectations.

    A record that did not parse is rejected with its problems; every other
    one is checked against ``record_expectations``
    (``conf/base/parameters_expectations.yml``). Nothing is dropped: a
    rejected record stays, with its ``rejection_reason`` and raw payload.
    """
    return check_expectations(
        parsed_records,
        record_expectations,
        declared_in="record_expectations, conf/base/parameters_expectations.yml",
        problems="problems",
    )


def select_rejected_records(checked_records: DataFrame) -> DataFrame:
    """The records ``check_records`` rejected: the quarantine, a table of its
    own to inspect and replay from.

    Returns:
        Every column of ``checked_records`` (the rejection_reason, the raw
        payload and its origin among them), for the rejected rows.
    """
    return checked_records.filter(F.col("rejection_reason").isNotNull())
