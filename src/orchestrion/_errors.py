"""The typed exception hierarchy.

Every error a user can see is an :class:`OrchestrionError`. Its message is one
line that names the file, field or model involved and says what to do. The CLI
prints ``str(error)`` and exits non-zero; it never shows a traceback for these.
"""

from __future__ import annotations


class OrchestrionError(Exception):
    """Base class of every error Orchestrion raises on purpose."""


class ConfigError(OrchestrionError):
    """A configuration file or option is wrong (bad YAML, unknown field, bad value)."""


class ModelError(OrchestrionError):
    """A model backend failed to produce a completion."""


class ModelNotFoundError(ModelError):
    """A model name is not in the pool, or a model file is missing."""


class ModelFileError(ModelError):
    """A model file does not match its catalog pin (size or sha256), or could not be fetched."""


class ModelUnavailableError(ModelError):
    """A model server could not be reached or kept failing after retries."""


class ModelHTTPError(ModelUnavailableError):
    """A model server answered with an HTTP error status.

    ``status`` is the HTTP status, ``body`` the server's error message, and
    ``retryable`` whether the request was worth retrying: false for a 4xx other than
    429 (the request itself was refused, so it failed at once), true for 429 and 5xx
    (raised once the retries ran out).
    """

    def __init__(self, message: str, status: int, body: str, retryable: bool) -> None:
        super().__init__(message)
        self.status = status
        self.body = body
        self.retryable = retryable


class StructuredOutputError(ModelError):
    """A model's output never matched the required schema within the allowed repairs."""


class ToolNotFoundError(OrchestrionError):
    """A tool name is not in the registry."""


class BudgetExceededError(OrchestrionError):
    """A budget limit was reached; work stops cleanly and the trace is kept."""

    def __init__(self, limit: str, used: float, allowed: float) -> None:
        self.limit = limit
        self.used = used
        self.allowed = allowed
        super().__init__(f"budget exceeded: {limit} used {used:g} of {allowed:g}")


class PlanError(OrchestrionError):
    """A plan (DAG) is invalid: a cycle, a missing dependency or a duplicate node."""


class TraceError(OrchestrionError):
    """The trace store could not be read or written."""


class StrategyNotFoundError(OrchestrionError):
    """A strategy name is not registered."""


class SandboxUnavailableError(OrchestrionError):
    """The isolation asked for (bubblewrap or namespaces) cannot work on this host."""


class RunLockedError(OrchestrionError):
    """Another live process holds the resume lock of an eval run."""
