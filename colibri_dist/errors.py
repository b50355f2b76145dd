"""Exception hierarchy shared by every room.

Every exception pickles intact across Ray process boundaries: positional constructor arguments go to
super().__init__ (Exception pickles its args), keyword-only ones are attributes (Exception pickles __dict__).

    ColibriError
      FormatError, StoreError -> IntegrityError     bad container / expert data (checked before use)
      ConfigError                                   a YAML config (file:line:column and key)
      InvalidArgument (also ValueError)             a caller's bad value: .parameter, .value name it
      ResourceError                                 a bounded resource ran out (KV cache blocks, length)
      NumericalError                                a computation went non-finite (NaN/inf logits)
      NativeError, PoolError                        the C core / the Ray pool failed
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
    """A caller passed a wrong shape, dtype, layer, expert or option. As vLLM's validation error:
    `.parameter` names the field (e.g. "temperature", "pool.workers") and `.value` is the rejected value,
    when the raiser knows them (None otherwise); the message names them too."""

    def __init__(self, message="", *, parameter=None, value=None):
        super().__init__(message)
        self.parameter, self.value = parameter, value


class ResourceError(ColibriError):
    """A bounded resource ran out (KV cache blocks, the model's maximum length): the request is valid and
    fits more of it, or later. Not an InvalidArgument; `colibri` exits 1 on it."""


class NumericalError(ColibriError):
    """A computation produced non-finite values where a number is needed (NaN/+inf logits, nothing but
    -inf): a fault of the model or its weights, not of the caller's input. `colibri` exits 4 on it."""


class StoreError(ColibriError):
    """The expert store could not produce an expert (source read failure, bad spill)."""


class PoolError(ColibriError):
    """The Ray worker pool failed in a way it could not recover from."""


class IntegrityError(FormatError, StoreError):
    """Tensor or expert data failed its check before use: checksum mismatch or NaN/Inf
    weights/scales. The message names the file and the layer/expert or tensor. It is a
    FormatError (the container is bad) and a StoreError (the store could not produce it)."""
