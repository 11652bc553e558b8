"""``python -m kedro_streaming.devtools``: the development services' commands."""

from kedro_streaming.devtools.extra import services

services().main(prog_name="python -m kedro_streaming.devtools")
