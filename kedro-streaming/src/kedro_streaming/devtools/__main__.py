"""``python -m kedro_streaming.devtools``: the development services' commands."""

import sys

from .cli import main

sys.exit(main())
