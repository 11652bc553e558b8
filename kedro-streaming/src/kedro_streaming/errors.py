"""What the streaming runtime raises."""


class StreamingConfigError(ValueError):
    """The run's streaming configuration cannot work; nothing was started."""


class StreamingQueryFailed(RuntimeError):
    """A streaming query of the run stopped with an error."""
