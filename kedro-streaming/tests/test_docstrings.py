"""Docstrings that run: each public function and class shows how it is used
under an ``Example:`` heading, and the examples are checked here.

- ``>>>`` examples, in every module of the package, run as doctests (with
  ``spark``, the local session of the ``spark`` fixture);
- a dataset's ```` ```yaml ```` example loads into a Kedro catalog, and a
  ``SparkStreamingDataset`` entry has no key it does not take;
- a ```` ```python ```` example, for a name that needs what a test does not
  have (``COMPILE_ONLY``), parses.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import inspect
import io
import logging
import pkgutil
import re
import textwrap

import kedro_streaming
import pytest
import yaml
from kedro.io import AbstractDataset, DataCatalog
from kedro_streaming import testing

# Each public function and class, by the name a user imports it by.
PUBLIC = {
    **{
        name: getattr(kedro_streaming, name)
        for name in kedro_streaming.__all__
        if inspect.isclass(getattr(kedro_streaming, name))
        or inspect.isfunction(getattr(kedro_streaming, name))
    },
    "testing.StreamTest": testing.StreamTest,
    "testing.Incident": testing.Incident,
}
DATASETS = sorted(
    name
    for name, obj in PUBLIC.items()
    if inspect.isclass(obj) and issubclass(obj, AbstractDataset)
)
# Names whose example needs what a test does not have: a ```python block,
# parsed only. Every other function and class has a doctest.
COMPILE_ONLY = {
    "kafka_producer": "needs a Kafka broker and a project's conf/<env>",
    "kafka_consumer": "needs a Kafka broker and a project's conf/<env>",
    "SchemaRegistry": "needs a schema registry to answer",
    "avro_framer": "registers its schema with a schema registry",
    "avro_reader": "looks writer schemas up in a schema registry",
    "spark_session": "builds the session from a Kedro project's spark.yml",
    "SparkHooks": "registered in a Kedro project's settings.py",
    "StreamingQueryHooks": "registered in a Kedro project's settings.py",
    "StreamingQueryFailed": "raised by a Kedro run whose streaming query fails",
    "testing.Incident": "replays a batch `kedro streams capture` took from a project",
}
# Names whose docstring has no example yet, and why; each test of theirs is
# expected to fail until it has one (then take the name out).
NO_EXAMPLE_YET: dict[str, str] = {}
_HEADING = re.compile(r"^(\s*)Example:\s*$")
_FENCE = re.compile(r"^```(\w+)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)


def example_of(obj: object) -> str | None:
    """The text under the ``Example:`` heading of ``obj``'s own docstring."""
    lines = inspect.cleandoc(obj.__doc__ or "").splitlines()
    for number, line in enumerate(lines):
        heading = _HEADING.match(line)
        if heading is None:
            continue
        body = []
        for following in lines[number + 1 :]:
            indent = len(following) - len(following.lstrip())
            if following.strip() and indent <= len(heading[1]):
                break
            body.append(following)
        return textwrap.dedent("\n".join(body)).strip("\n")
    return None


def blocks(obj: object, language: str) -> list[str]:
    """The fenced ``language`` blocks of ``obj``'s example."""
    found = _FENCE.findall(example_of(obj) or "")
    return [textwrap.dedent(text) for kind, text in found if kind == language]


def _param(name: str, *args: object):
    marks = (
        [pytest.mark.xfail(reason=NO_EXAMPLE_YET[name], strict=True)]
        if name in NO_EXAMPLE_YET
        else []
    )
    return pytest.param(name, *args, id=name, marks=marks)


@pytest.mark.parametrize("name", [_param(name) for name in sorted(PUBLIC)])
def test_each_public_name_has_an_example(name):
    example = example_of(PUBLIC[name])
    assert example, f"{name}'s docstring has no `Example:` section"
    if name in DATASETS:
        assert blocks(PUBLIC[name], "yaml"), f"{name}: give a ```yaml catalog entry"
    elif name in COMPILE_ONLY:
        assert blocks(PUBLIC[name], "python"), f"{name}: give a ```python block"
    else:
        assert ">>>" in example, f"{name}: give a doctest (>>>)"


def _modules() -> list[str]:
    """Every module of the package, but those that run a command (``__main__``)."""
    found = pkgutil.walk_packages(kedro_streaming.__path__, "kedro_streaming.")
    return sorted(
        [kedro_streaming.__name__]
        + [m.name for m in found if not m.name.endswith(".__main__")]
    )


def _doctests() -> list:
    """A param per doctest of the package; a module that does not import
    fails as its own param (a devtools module skips: optional dependencies)."""
    finder = doctest.DocTestFinder()
    params = []
    for name in _modules():
        try:
            module = importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 (reported by the test)
            params.append(pytest.param(name, error, id=f"{name} (import)"))
            continue
        params += [
            pytest.param(name, test, id=test.name)
            for test in finder.find(module)
            if test.examples
        ]
    return params


def _names(test: doctest.DocTest) -> set[str]:
    """The names the examples of ``test`` use."""
    return {
        node.id
        for example in test.examples
        for node in ast.walk(ast.parse(example.source))
        if isinstance(node, ast.Name)
    }


@pytest.mark.parametrize(("module", "test"), _doctests())
def test_doctest_examples_pass(module, test, request):
    if isinstance(test, Exception):
        if ".devtools." in module:
            pytest.skip(f"{module} does not import here: {test!r}")
        pytest.fail(f"{module} does not import: {test!r}")
    if "spark" in _names(test):
        test.globs["spark"] = request.getfixturevalue("spark")
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    report = io.StringIO()
    # Log records are not the example's output (Kedro's handler prints them).
    logs_disabled = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        result = runner.run(test, out=report.write)
    finally:
        logging.disable(logs_disabled)
        test.globs.clear()
    assert result.failed == 0, f"{test.name} ({module}):\n{report.getvalue()}"


@pytest.mark.parametrize(
    ("name", "number", "entry"),
    [
        pytest.param(name, number, entry, id=f"{name}-{number}")
        for name in DATASETS
        for number, entry in enumerate(blocks(PUBLIC[name], "yaml"), 1)
    ],
)
def test_yaml_examples_load_into_a_catalog(name, number, entry):
    config = yaml.safe_load(entry)
    catalog = DataCatalog.from_config(config)
    for dataset_name in config:
        dataset = catalog.get(dataset_name)
        assert isinstance(dataset, PUBLIC[name]), (dataset_name, type(dataset))
        if isinstance(dataset, kedro_streaming.SparkStreamingDataset):
            assert dataset.key_problems() == [], f"{name} example {number}"


@pytest.mark.parametrize("name", [_param(name) for name in sorted(COMPILE_ONLY)])
def test_python_examples_parse(name):
    found = blocks(PUBLIC[name], "python")
    assert found, f"{name} has no ```python example"
    for text in found:
        ast.parse(text, filename=f"<{name} example>")
