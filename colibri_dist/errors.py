"""Exception hierarchy shared by every room.

Every exception passes all its constructor arguments to super().__init__ so it
pickles intact across Ray process boundaries.
"""


class ColibriError(Exception):
    """Root of every error colibri raises on purpose."""


class FormatError(ColibriError):
    """A .colibri container or a source checkpoint is malformed, damaged or unsupported.

    The message always names the file (and the tensor, layer or expert when known).
    """


class ConfigError(ColibriError):
    """A YAML job config or a model config is invalid; the message names file:line:column and key."""


class NativeError(ColibriError):
    """A call into the C core failed. `.code` is the cb_status value."""

    def __init__(self, message, code=None):
        super().__init__(message, code)
        self.message = message
        self.code = code

    def __str__(self):
        return self.message


class InvalidArgument(ColibriError, ValueError):
    """A caller passed a wrong shape, dtype, layer, expert or option."""


class StoreError(ColibriError):
    """The expert store could not produce an expert (source read failure, bad spill)."""


class PoolError(ColibriError):
    """The Ray worker pool failed in a way it could not recover from."""


class IntegrityError(FormatError, StoreError):
    """Tensor or expert data failed its check before use: checksum mismatch or NaN/Inf
    weights/scales. The message names the file and the layer/expert or tensor. It is a
    FormatError (the container is bad) and a StoreError (the store could not produce it)."""
