"""Our own failures: counted, logged once, and the warning never quotes what the failure was about."""

from __future__ import annotations

import logging

import pytest

import tallyspan
from tallyspan._selfstats import swallowed

_logger = logging.getLogger("tallyspan.test_selfstats")


def _fail(marker: str) -> None:
    raise ValueError(f"could not parse the output {marker!r}")


def test_the_first_failure_warns_with_its_type_and_stack_but_not_its_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=_logger.name)
    for marker in ("PROMPT-MARKER-1", "PROMPT-MARKER-2", "PROMPT-MARKER-3"):
        try:
            _fail(marker)
        except ValueError:
            swallowed(_logger, "extract.test", "extracting the test span failed")
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1
    text = warnings[0].getMessage()
    assert "extracting the test span failed" in text
    assert "builtins.ValueError" in text
    assert "in _fail" in text  # where it was raised
    assert "MARKER" not in text
    assert warnings[0].exc_info is None
    # The whole exception is there for whoever turns debug logging on.
    debug = [record for record in caplog.records if record.levelno == logging.DEBUG]
    assert len(debug) == 3
    assert all(record.exc_info is not None for record in debug)
    assert tallyspan.stats()["errors.extract.test"] == 3
