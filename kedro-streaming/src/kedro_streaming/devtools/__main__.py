"""``python -m kedro_streaming.devtools``: the development services' commands."""

from kedro_streaming._cli import dev_extra_missing, say_dev_extra_missing
from kedro_streaming.devtools.cli import main

if dev_extra_missing():  # every command here needs it: said even for --help
    say_dev_extra_missing()
main.main(prog_name="python -m kedro_streaming.devtools")
