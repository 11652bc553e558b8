"""What the starter's tests share, by topic: names, commands, and how outputs
are read and compared with the independent computation in `reference.py`.

- `common`: paths, versions, logins, `--params`; `run`, `kedro_run`,
  `streams`, `free_port`, `quiet_env`, `tool_service`.
- `project`: `kedro new`, the walkthrough's project, virtualenvs, prefetches.
- `processes`: `kedro run` in the background, and crashing it.
- `checkpoints`: tables and checkpoints read without Spark, micro-batches
  replayed from them.
- `compare`: outputs and progress logs against the reference.
- `kafka`: sending, reading back and checking messages.
- `metrics`: the progress log and the Prometheus endpoint.
- `prometheus`: the real Prometheus and promtool, run by the tests.
- `security`: certificates, trust stores, secrets kept secret.

Fixtures live in `conftest.py`; test modules import from these modules and
from `reference` only, never from each other.
"""
