"""Typed errors. Each carries its exit code; `cli.main` is the one place that maps them to a
one-line message, so no traceback reaches a user."""

from __future__ import annotations


class TraceAnalyzerError(Exception):
    """Base of every error the tool reports to a user."""

    exit_code = 2

    def __init__(self, path: str | None, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}" if path else problem)

    def __reduce__(self):  # picklable, so an error raised in a worker process reaches cli.main
        return (type(self), (self.path, self.problem))


class TraceReadError(TraceAnalyzerError):
    """The input cannot be read at all: missing, unreadable, not JSON, not gzip."""


class NotATraceError(TraceAnalyzerError):
    """The input is JSON but not a Chrome / Kineto trace."""


class DecompressionLimitError(TraceAnalyzerError):
    """Decompressing the input would exceed the configured limit."""


class UsageError(TraceAnalyzerError):
    """Options that cannot work together, or a bad option file."""


class RegressionDetected(TraceAnalyzerError):
    """A check the user asked for failed (`diff --fail-if-slower`): not an error of the tool,
    so the message carries no 'error:' prefix."""

    exit_code = 1
