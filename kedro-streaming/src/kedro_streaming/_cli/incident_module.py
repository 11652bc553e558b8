"""The test ``kedro streams capture`` writes beside a captured batch."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_TEST = '''"""Batch {batch} of {sink}, as `kedro streams capture` took it from the
checkpoint: its input as read, the state before it, what it wrote."""

from pathlib import Path

from kedro_streaming.testing import Incident

{import_line}

INCIDENT = Incident(Path(__file__).parent / "{folder}")


def test_batch_{batch}_of_{function}_replays_as_it_ran(spark, tmp_path):
    replayed = INCIDENT.replay(spark, {pipeline}, workdir=tmp_path)
    # What the batch wrote ({folder}/written.json). To pin a bug, write there
    # what it should have written, see this test fail, then fix the node.
    assert replayed.rows == INCIDENT.written(spark)
'''


def write_test(metadata, folder: Path, sink: str, batch: int, pipeline: str) -> Path:
    """Writes the test of the batch captured in ``folder`` (beside it)."""
    package = metadata.package_name
    module = f"{package}.pipelines.{pipeline}"
    if importlib.util.find_spec(module) is not None:
        import_line = f"from {module} import create_pipeline"
        made = "create_pipeline()"
    else:  # a registry of its own: its pipelines by name
        import_line = f"from {package}.pipeline_registry import register_pipelines"
        made = f'register_pipelines()["{pipeline}"]'
    function = "".join(c if c.isalnum() else "_" for c in sink).lower()
    test = folder.parent / f"test_{folder.name}.py"
    test.write_text(
        _TEST.format(
            batch=batch,
            sink=sink,
            folder=folder.name,
            import_line=import_line,
            function=function,
            pipeline=made,
        ),
        encoding="utf-8",
    )
    init = folder.parent / "__init__.py"
    if (folder.parent.parent / "__init__.py").exists() and not init.exists():
        init.write_text("")  # the tests are a package: so is their folder
    return test
