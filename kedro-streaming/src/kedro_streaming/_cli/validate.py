"""``kedro streams validate``: every streaming query built and checked (a dry run)."""

from __future__ import annotations

from typing import Any

import click
from kedro.framework.cli.utils import _split_params, env_option

from kedro_streaming._checks.catalog import check_catalog_has, fan_out, query_nodes
from kedro_streaming._checks.checks import check_before_spark, check_with_spark
from kedro_streaming._checks.constants import add_constant_problems
from kedro_streaming._checks.plans import build_plans
from kedro_streaming._checks.spec import RunSpec
from kedro_streaming._cli.project import _open, pipelines_option, queried
from kedro_streaming._session.session import spark_session
from kedro_streaming.errors import StreamingConfigError


@click.command()
@env_option
@pipelines_option
@click.option(
    "--params",
    type=click.UNPROCESSED,
    default="",
    callback=_split_params,
    help="As for `kedro run`: the run's parameters and settings, e.g. "
    "trigger_interval=1 second.",
)
@click.pass_obj
def validate(metadata, env: str | None, pipelines: list[str], params) -> None:
    """Builds every streaming query up to its start and checks it (a dry run).

    Nothing is written, no checkpoint is made, no offset is read.
    """
    run = _open(metadata, env, pipelines, params)
    try:
        check_catalog_has(run.catalog, run.pipeline, run.other_envs)
    except StreamingConfigError as error:
        # No query can be built without the datasets the error names.
        raise click.ClickException(f"{error}\nFix it before `kedro run`.") from None
    # The run's own checks, in its order: the first problem before Spark and
    # the first with it (a later check may rest on an earlier one).
    problems, now = [], []
    try:
        now = check_before_spark(run, dry_run=True)
    except StreamingConfigError as error:
        problems.append(str(error))
    for note in now:  # true now; `kedro run` checks them again when it starts
        click.echo(f"note: before `kedro run`: {note}")
    spark = spark_session()
    try:
        check_with_spark(run, spark)
    except StreamingConfigError as error:
        problems.append(str(error))
    configuration_problems = len(problems)
    sinks = queried(run)
    for line in fan_out(run.catalog, run.pipeline, list(sinks)):
        click.echo(f"note: {line}.")
    try:
        bounded = run.bounded
    except StreamingConfigError:  # an unknown trigger, said above
        bounded = False
    plans = build_plans(spark, run, sinks, bounded=bounded)
    add_constant_problems(spark, run.catalog, run.pipeline, plans)
    problems += plans.problems
    for note in plans.notes:
        click.echo(f"note: {note}.")
    _say_verdicts(run, plans, problems[:configuration_problems])
    if problems:
        for problem in problems:
            click.echo("- " + problem.replace("\n", "\n  "), err=True)
        raise click.ClickException(
            f"{_count(problems)} problem(s): fix them before `kedro run`."
        )
    click.echo("All streaming queries can start.")


def _say_verdicts(run: RunSpec, plans: Any, earlier: list[str]) -> None:
    """One line per query: ok, its verdict, or the problem found before the
    plans that names one of its datasets."""
    for name in dict.fromkeys([*plans.frames, *plans.verdicts]):
        named = [
            dataset
            for dataset in _datasets_of(run, name)
            if any(f"'{dataset}'" in problem for problem in earlier)
        ]
        verdict = plans.verdicts.get(name)
        if named:
            click.echo(
                f"query {name}: its plan builds, but see the problem with "
                f"{', '.join(map(repr, named))} below"
            )
        elif verdict is None:
            click.echo(f"query {name}: ok")
        else:
            click.echo(verdict.describe(name, run.readers.get(name, [])))


def _count(problems: list[str]) -> int:
    r"""The problems said, one per bullet: a check that found several lists
    them under its heading (``\n  - ``).

    Example:
        >>> _count(["one", "Options in conf/:\n  - 'a' bad\n  - 'b' bad"])
        3
    """
    return sum(max(1, problem.count("\n  - ")) for problem in problems)


def _datasets_of(run: RunSpec, sink: str) -> list[str]:
    """The sink and every dataset its query's nodes read (its sources among
    them), in the order the nodes run."""
    names = set(query_nodes(run.catalog, run.pipeline, sink))
    return list(
        dict.fromkeys(
            [
                sink,
                *(
                    name
                    for node in run.pipeline.nodes
                    if node.name in names
                    for name in node.inputs
                ),
            ]
        )
    )
