"""Development services on this machine, without Docker: a Kafka broker, a
schema registry, a Spark cluster and Connect server, and messages to and from
a topic (``kedro streams ...``; ``pip install "kedro-streaming[dev]"``)."""
