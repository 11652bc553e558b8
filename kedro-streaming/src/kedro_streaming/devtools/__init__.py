"""Development services for a streaming project, on this machine and without
Docker: a Kafka broker (``broker``), a Spark standalone cluster and a Spark
Connect server (``spark``), and spark-submit of a packaged project. Their
commands are ``kedro streams broker|cluster|connect|submit``; nothing in the
runtime imports them.
"""
