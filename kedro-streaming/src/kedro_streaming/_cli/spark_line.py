"""``kedro streams spark-line VERSION``: the project moved to another Spark release."""

from __future__ import annotations

from pathlib import Path

import click

from kedro_streaming._session.lines import move_to_spark, project_spark
from kedro_streaming.errors import StreamingConfigError


@click.command(name="spark-line")
@click.argument("version")
@click.option(
    "--older",
    is_flag=True,
    help="Move to an older release (a rollback): only over checkpoints that "
    "release wrote, restored from a copy.",
)
@click.pass_obj
def spark_line(metadata, version: str, older: bool) -> None:
    """Rewrites the project's Spark pins for another release, e.g. 4.2.0.

    pyspark in requirements.txt and pyproject.toml, the Kafka connector, Avro
    and Delta packages and the checkpoint file manager in conf/*/spark.yml:
    each line it changes is printed. Checkpoints carry over: stop the
    streams, move, `pip install -r requirements.txt -e .`, `kedro streams
    validate`, then `kedro run` (docs/spark-lines.md).
    """
    root = Path(metadata.project_path)
    try:
        current = project_spark(root)
        changes = move_to_spark(root, version, older=older)
    except StreamingConfigError as error:
        raise click.ClickException(str(error)) from None
    if not changes:
        click.echo(f"The project is on Spark {version} already: nothing to change.")
        return
    click.echo(f"Moved the project from Spark {current} to {version}:")
    for change in changes:
        click.echo(f"  {change}")
    click.echo(
        "Next: pip install -r requirements.txt -e . (with the extras you "
        'installed, e.g. -e ".[dev]"), then kedro streams validate '
        "(each query checked against its checkpoint on the new Spark) and "
        "kedro run. Your checkpoints carry over; keep a copy of them until the "
        "queries have run on the new Spark, for a rollback."
    )
