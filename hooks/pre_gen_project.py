"""Refuses a Spark version this starter does not support, before any file is written.

`spark_version` (``kedro new --config``) decides PySpark, the Kafka connector,
the Spark Connect client and the Delta package; they exist together only for
the Spark lines below.
"""

import re
import sys

SUPPORTED_LINES = ("4.0", "4.1", "4.2")
spark_version = "{{ cookiecutter.spark_version }}"

found = re.fullmatch(r"(\d+\.\d+)\.\d+", spark_version)
if found is None or found[1] not in SUPPORTED_LINES:
    sys.exit(
        f"spark_version '{spark_version}' is not supported: choose a release of "
        f"Spark {', '.join(SUPPORTED_LINES)} (e.g. 4.2.0, 4.1.1 or 4.0.0), the one "
        "your platform runs. Spark 4.3 comes once a Delta Lake release is built "
        "for it."
    )

example = "{{ cookiecutter.example }}"
if example not in ("taxi", "none"):
    sys.exit(
        f"example '{example}' is not one of taxi (the NYC-taxi example) or none "
        "(one small pipeline to make your own)"
    )
