"""Times on the command line: ``--since`` (an age or an ISO time) in, readable UTC times out."""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone
from typing import Final

import click

__all__ = ["SINCE_HELP", "parse_since", "since_option", "utc_time"]

_SECONDS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE: Final = re.compile(r"(\d{1,12}(?:\.\d{1,9})?)([smhdw])")
SINCE_HELP: Final = "Only what started since then: an age (15m, 2h, 7d) or an ISO time (2026-01-31T09:00)."


def parse_since(text: str) -> int:
    """Unix nanoseconds of ``--since``: an age back from now (``90s``, ``15m``, ``2h``, ``7d``, ``2w``) or an
    ISO 8601 time (local time unless it gives an offset or ``Z``); never before 1970.

    Raises:
        click.BadParameter: the text is neither.
    """
    text = text.strip()
    age = _AGE.fullmatch(text)
    if age is not None:
        seconds = float(age.group(1)) * _SECONDS[age.group(2)]
        return max(0, time.time_ns() - int(seconds * 1e9))
    try:
        # Python 3.10's fromisoformat does not take the "Z" suffix.
        moment = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
        # timestamp() reads a time without an offset as the user's local time, as they typed it.
        return max(0, int(moment.timestamp() * 1e9))
    except (ValueError, OverflowError, OSError) as exc:  # not a time, or one the platform cannot convert
        raise click.BadParameter(
            f"{text!r} is neither an age like 15m, 2h, 7d nor an ISO time like 2026-01-31T09:00"
        ) from exc


def _since(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    del ctx, param
    return None if value is None else parse_since(value)


since_option = click.option(
    "--since", "since_unix_nano", metavar="AGE|TIME", default=None, callback=_since, help=SINCE_HELP
)
"""The ``--since`` option: the command gets ``since_unix_nano`` (int or None)."""


def utc_time(unix_nano: int | None) -> str | None:
    """``2026-01-31 09:00:05`` (UTC), or None."""
    if unix_nano is None:
        return None
    return datetime.fromtimestamp(unix_nano / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
