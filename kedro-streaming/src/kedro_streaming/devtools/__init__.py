"""Development services for a streaming project, on this machine and without
Docker: a Kafka broker (``broker``), a schema registry (``registry``), a Spark
standalone cluster and a Spark Connect server (``spark``), spark-submit of a
packaged project, and messages to and from a topic (``kafka``). Their commands
(``cli``) are ``kedro streams broker|registry|cluster|connect|submit|send|watch``.
They need the ``[dev]`` extra: ``pip install "kedro-streaming[dev]"``.
"""
