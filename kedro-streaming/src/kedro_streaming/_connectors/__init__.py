"""The things the runtime connects, one room each: files, Kafka (its
options, checks, lag, security and clients), Avro with its schema registry,
and Delta. The run-level code asks each in turn through ``Connector``
(``base.py``); the catalog's dataset composes them (``dataset.py``).
"""
