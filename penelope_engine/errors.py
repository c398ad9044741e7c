"""Errors the engine raises. Each carries a message that says what to fix."""


class PenelopeError(Exception):
    """Base class of every error the engine raises on purpose."""


class ConfigError(PenelopeError, ValueError):
    """A configuration value is invalid."""


class InvalidRequestError(PenelopeError, ValueError):
    """A request is malformed (empty prompt, too long, bad sampling values)."""


class CapacityError(PenelopeError):
    """A request cannot fit in the KV cache even after evicting everything unlocked."""


class StepMemoryError(CapacityError):
    """A request's share of a step did not fit in the device's memory, even run alone."""


class EngineError(PenelopeError):
    """The engine failed while running a request (a fault, not the request's doing)."""


class UnknownNameError(PenelopeError, KeyError):
    """An unknown registry name (model, policy); the message lists the valid ones."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""
