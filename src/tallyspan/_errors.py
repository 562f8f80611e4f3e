"""The exceptions tallyspan raises, all from ``instrument()``, the CLI and the API; never on the span path.

::

    TallyspanError
     └── ConfigError (ValueError)      a bad argument, environment value or file
          └── ContractError             a contract that cannot be used (file, stage, field, line)

``Rejected`` is not an error of ours: a tool raises it to say it refused the call (policy, permission),
so the ledger records the outcome ``rejected`` instead of ``failed``.
"""

from __future__ import annotations

__all__ = ["ConfigError", "ContractError", "Rejected", "TallyspanError"]


class TallyspanError(Exception):
    """Base class of every error tallyspan raises."""


class ConfigError(TallyspanError, ValueError):
    """A configuration argument, environment value or file is invalid."""


class ContractError(ConfigError):
    """A contract cannot be loaded or compiled; names the file, the stage, the field and the line."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        stage: str | None = None,
        field: str | None = None,
        line: int | None = None,
    ) -> None:
        self.file = file
        self.stage = stage
        self.field = field
        self.line = line
        where = []
        if file is not None:
            where.append(f"{file}:{line}" if line is not None else file)
        if stage is not None:
            where.append(f"stage {stage!r}")
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class Rejected(Exception):  # noqa: N818 - it names an outcome, not an error of ours
    """Raised by a tool to refuse a call (policy, permission); recorded with the outcome ``rejected``."""
