"""Every error rm raises on purpose: one hierarchy, so the command line can tell a user's mistake from a bug.

Library code raises these and never exits; `rm/cli/` is the one place that turns them into a one-line
message and an exit code (2 for what the user asked, 1 for a run that could not go on). Anything else
that escapes is a bug in rm and keeps its traceback.
"""

from __future__ import annotations


class RMError(Exception):
    """Something the user can fix, phrased in their terms (file and line, dotted config key, path)."""


class ConfigError(RMError, ValueError):
    """A config problem, phrased in the user's terms (file and dotted key)."""


class DataError(RMError, ValueError):
    """Bad input, phrased with the file (or dataset), the line (or row) and the field."""


class NotPreferenceData(DataError):
    """The source is not preference data at all (red-team transcripts): refused for training, fine to inspect."""


class RecordError(RMError, ValueError):
    """One record cannot be used; `reason` is a short code that skip mode counts by.

    Raised by the record parsers and caught by the loader, which stops (error mode) or counts it (skip).
    """

    def __init__(self, reason: str, message: str, field: str | None = None):
        super().__init__(message)
        self.reason = reason
        self.field = field
        self.message = message


class ModelError(RMError, ValueError):
    """A model that cannot be loaded or is not a one-output reward model, named by its path."""


class ExportError(RMError, ValueError):
    """A run or checkpoint that cannot be exported, phrased with the path and what is missing."""


class TrainingError(RMError, RuntimeError):
    """A run that cannot go on, phrased as what happened and which settings to change."""


class TrialCrashed(RMError):
    """A sweep trial's run stopped with an error; the trial is recorded as failed and the sweep goes on."""
