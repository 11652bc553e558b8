"""The development services' command line (``kedro_streaming.devtools.cli``),
as ``python -m kedro_streaming.devtools`` and as ``kedro streams`` run it:
click's test runner, the real commands, and a scratch Kedro project where a
command needs one. Nothing here starts a service."""

from __future__ import annotations

import importlib.metadata
import json
import shlex
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from kedro_streaming.commands import commands
from kedro_streaming.devtools import extra
from kedro_streaming.devtools.cli import main


def command_paths(group: click.Group, path: tuple[str, ...] = ()):
    """``(path, command)`` of every command below ``group``, groups too."""
    for name, command in group.commands.items():
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from command_paths(command, (*path, name))


COMMANDS = list(command_paths(main))


def test_the_services_are_the_commands_kedro_streams_mounts():
    assert sorted(main.commands) == sorted(extra.COMMANDS)
    streams = commands.commands["streams"]
    assert set(extra.COMMANDS) <= set(streams.commands)


@pytest.mark.parametrize(
    ("path", "command"), COMMANDS, ids=[" ".join(path) for path, _ in COMMANDS]
)
def test_every_command_has_help_naming_its_options(path, command):
    for cli, prefix in ((main, []), (commands, ["streams"])):
        result = CliRunner().invoke(cli, [*prefix, *path, "--help"])
        assert result.exit_code == 0, result.output
        assert f" {' '.join(path)} [OPTIONS]" in result.output
        for option in command.params:
            if isinstance(option, click.Option):
                assert option.opts[0] in result.output, (option.name, result.output)
        if isinstance(command, click.Group):
            assert all(name in result.output for name in command.commands)


def test_status_exits_3_unless_the_service_runs(tmp_path):
    for service in ("broker", "registry", "cluster", "connect"):
        result = CliRunner().invoke(
            main, [service, "status", "--data-dir", str(tmp_path / service)]
        )
        assert result.exit_code == 3, result.output
        assert json.loads(result.stdout)["running"] is False


def test_a_refused_option_is_one_error_line(tmp_path, monkeypatch):
    monkeypatch.delenv("KAFKA_SASL_PASSWORD", raising=False)
    result = CliRunner().invoke(
        commands,
        ["streams", "broker", "start", "--sasl-user", "alice:secret"],
        obj=None,
    )
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == (
        "error: --sasl-user alice:...: a password on the command line is shown "
        "to every user of this machine (ps) and kept in the shell's history. "
        "Give --sasl-user alice and export KAFKA_SASL_PASSWORD (or type it when "
        "asked, on a terminal)\n"
    )
    assert not (tmp_path / "data").exists()


def test_a_broker_port_taken_is_named_with_what_to_do(tmp_path):
    """Before any Java starts: the port, where it was read, and the ways out
    (the starter's test_mistakes has a Kafka broker hold it)."""
    with socket.socket() as taken:  # as by another program
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            commands,
            [
                "streams",
                "broker",
                "start",
                "--port",
                str(port),
                "--data-dir",
                str(tmp_path / "broker"),
            ],
            obj=None,
        )
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: port {port} (--port) is taken by another program: stop it, or "
        "start this one on another port: `kedro streams broker start --port "
        "<port>` (--port 0: a free one), then set kafka.bootstrap_servers in "
        "conf/<env>/globals.yml to the address it prints\n"
    )
    assert not (tmp_path / "broker" / "broker.json").exists()


def test_without_the_dev_extra_one_line_says_how_to_install_it(monkeypatch):
    # As if fastavro were not installed: importing it raises ImportError.
    monkeypatch.setitem(sys.modules, "fastavro", None)
    assert extra.missing_modules() == ["fastavro"]
    for arguments in (["broker", "start"], ["send", "--help"], ["submit"]):
        result = CliRunner().invoke(commands, ["streams", *arguments])
        assert result.exit_code == 1, result.output
        assert result.stdout == ""
        assert result.stderr == (
            "the development services need kedro-streaming[dev]: "
            'pip install "kedro-streaming[dev]"\n'
        )
    # The runtime's commands stay; the services' list says what they need.
    listed = CliRunner().invoke(commands, ["streams", "--help"])
    assert listed.exit_code == 0, listed.output
    assert "broker    A development service (needs kedro-streaming[dev])" in (
        listed.output
    )
    assert "validate" in listed.output


def test_python_m_without_the_dev_extra(tmp_path):
    script = (
        "import runpy, sys; sys.modules['fastavro'] = None; "
        "sys.argv = ['x', 'broker', 'status']; "
        "runpy.run_module('kedro_streaming.devtools', run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == extra.MISSING + "\n"


@pytest.fixture
def packaged_project(tmp_path) -> Path:
    """A scratch Kedro project, ``demo``, packaged (``dist/``) as
    ``kedro package`` leaves it, with a ``cluster`` environment."""
    kedro = importlib.metadata.version("kedro")
    files = {
        "pyproject.toml": f"""
            [tool.kedro]
            package_name = "demo"
            project_name = "demo"
            kedro_init_version = "{kedro}"
            source_dir = "src"
            """,
        "src/demo/__init__.py": "",
        "src/demo/settings.py": """
            CONFIG_LOADER_ARGS = {"config_patterns": {"spark": ["spark*"]}}
            """,
        "conf/cluster/spark.yml": "spark.master: spark://127.0.0.1:1\n",
        "dist/demo-0.1-py3-none-any.whl": "",
        "dist/conf-demo.tar.gz": "",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return tmp_path


KEDRO_ARGS = ["--params", "trigger=available_now,note=a b", "--env", "x", "--dry-run"]


@pytest.mark.parametrize(
    "cli",
    [["-m", "kedro_streaming.devtools"], ["-m", "kedro", "streams"]],
    ids=["python -m", "kedro streams"],
)
def test_submit_hands_the_options_after_dashes_to_kedro_run(packaged_project, cli):
    """Every option after ``--`` reaches `kedro run`, as typed, even one
    ``submit`` has too (``--env``, ``--dry-run``)."""
    result = subprocess.run(
        [sys.executable, *cli, "submit", "--dry-run", "--", *KEDRO_ARGS],
        cwd=packaged_project,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    command = shlex.split(result.stderr.strip().splitlines()[-1])
    assert command[0].endswith("/bin/spark-submit")
    assert command[-len(KEDRO_ARGS) - 4 :] == [
        *("--env", "cluster", "--conf-source", "dist/conf-demo.tar.gz"),
        *KEDRO_ARGS,
    ]
    properties = packaged_project / "dist/spark-cluster.conf"
    assert properties.read_text() == "spark.master spark://127.0.0.1:1\n"
    assert "spark-submit" not in result.stdout  # stdout: the command's result only
