"""What the report's HTML page reads beside the report: model calls per stage over time, and the reason
each failing trace's runs give for failing.

Usage::

    from tallyspan._store._store_queries import open_store
    from tallyspan._store._store_timeline import run_reasons, stage_timeline

    with open_store(".tallyspan/tallyspan.db") as db:
        timeline = stage_timeline(db)

Calls are counted once, as the report counts them (``_store_queries._counted_once``): a model span nested
in a model span of the same operation is the same call. The reasons are the run spans' own status
descriptions as the store holds them (the ledger processor writes them, what failed first:
``not_japanese, refusal in 2 of 5 calls``, ``ledger unbalanced: phantom_log issue_refund``); nothing here
composes a reason of its own.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from tallyspan._store._store_queries import _CALLS, _counted_once
from tallyspan._store._store_schema import RUNS, SPANS

__all__ = [
    "DEFAULT_MAX_PERIODS",
    "PERIODS_NS",
    "StagePeriod",
    "StageTimeline",
    "choose_period",
    "run_reasons",
    "stage_timeline",
]

_MS: Final = 1_000_000
_S: Final = 1000 * _MS
_MIN: Final = 60 * _S
_H: Final = 60 * _MIN
_D: Final = 24 * _H
PERIODS_NS: Final = (
    100 * _MS, 200 * _MS, 500 * _MS,
    _S, 2 * _S, 5 * _S, 10 * _S, 15 * _S, 30 * _S,
    _MIN, 2 * _MIN, 5 * _MIN, 10 * _MIN, 15 * _MIN, 30 * _MIN,
    _H, 2 * _H, 3 * _H, 6 * _H, 12 * _H,
    _D, 2 * _D, 7 * _D, 14 * _D, 30 * _D, 91 * _D, 365 * _D,
)  # fmt: skip
"""The lengths a period of the timeline may have, in nanoseconds (from a tenth of a second, for a run of
the demo, to a year); periods start at whole multiples of their length since the Unix epoch (UTC), so
an hour is 09:00 to 10:00."""
DEFAULT_MAX_PERIODS: Final = 24
"""Periods the timeline is cut into at most (the shortest length of ``PERIODS_NS`` that fits)."""


@dataclass(frozen=True)
class StagePeriod:
    """The model calls of one stage that started in one period, and how many of them violated its contract."""

    stage: str | None
    """None: calls outside any stage (listed only when one of them violated something)."""
    period: int
    """Which period: 0 is the one starting at ``StageTimeline.start_unix_nano``."""
    calls: int
    violating: int


@dataclass(frozen=True)
class StageTimeline:
    """Model calls per stage and period, from the first call's period to the last one's."""

    start_unix_nano: int | None
    """Where period 0 starts; None when no call is in scope."""
    period_ns: int
    """Every period's length, one of ``PERIODS_NS``."""
    periods: int
    """How many periods the time range covers (some may hold no call)."""
    stages: list[str | None]
    """The stages shown, by name; calls outside any stage (None) last, when one of them violated."""
    points: list[StagePeriod]
    """One per stage and period with calls, by stage (as ``stages``), then period."""


def choose_period(first_unix_nano: int, last_unix_nano: int, max_periods: int = DEFAULT_MAX_PERIODS) -> int:
    """The shortest length of ``PERIODS_NS`` whose aligned periods cover ``first`` to ``last`` in at most
    ``max_periods`` periods; the longest when none does."""
    for length in PERIODS_NS:
        if last_unix_nano // length - first_unix_nano // length + 1 <= max_periods:
            return length
    return PERIODS_NS[-1]


def stage_timeline(
    db: sqlite3.Connection, *, since_unix_nano: int | None = None, max_periods: int = DEFAULT_MAX_PERIODS
) -> StageTimeline:
    """Model calls per stage and period (each call counted once, in the period it started in).

    Args:
        db: the open store.
        since_unix_nano: only calls that started then or later.
        max_periods: the time range is cut into at most this many periods (see ``choose_period``).
    """
    with _counted_once(db, since_unix_nano):
        join = f"""FROM {_CALLS} AS c JOIN {SPANS} AS s
                   ON s.trace_id = c.trace_id AND s.span_id = c.call_span_id
                   WHERE s.start_unix_nano IS NOT NULL"""
        ranges = db.execute(
            f"""SELECT c.stage AS stage, MIN(s.start_unix_nano) AS first, MAX(s.start_unix_nano) AS last,
                       SUM(c.violating) AS violating {join} GROUP BY c.stage"""
        ).fetchall()
        shown = [row for row in ranges if row["stage"] is not None or row["violating"]]
        if not shown:
            return StageTimeline(None, PERIODS_NS[0], 0, [], [])
        first = min(row["first"] for row in shown)
        last = max(row["last"] for row in shown)
        length = choose_period(first, last, max_periods)
        start = first // length * length
        unstaged = any(row["stage"] is None for row in shown)
        rows = db.execute(
            f"""SELECT c.stage AS stage, (s.start_unix_nano - :start) / :length AS period,
                       COUNT(*) AS calls, SUM(c.violating) AS violating
                {join} AND (c.stage IS NOT NULL OR :unstaged)
                GROUP BY c.stage, period""",
            {"start": start, "length": length, "unstaged": unstaged},
        ).fetchall()
    stages: list[str | None] = sorted(row["stage"] for row in shown if row["stage"] is not None)
    if unstaged:
        stages.append(None)
    order = {stage: i for i, stage in enumerate(stages)}
    points = sorted(
        (StagePeriod(row["stage"], int(row["period"]), row["calls"], row["violating"] or 0) for row in rows),
        key=lambda point: (order[point.stage], point.period),
    )
    return StageTimeline(start, length, (last - start) // length + 1, stages, points)


def run_reasons(db: sqlite3.Connection, trace_ids: Sequence[str]) -> dict[str, list[str]]:
    """Per trace, the status descriptions of its run spans that ended with status ERROR, in start order,
    each once (an enclosing run repeats its runs' roll-up); traces without one are left out."""
    reasons: dict[str, list[str]] = {}
    for row in db.execute(
        f"""SELECT s.trace_id AS trace_id, s.status_description AS reason
            FROM {RUNS} AS run JOIN {SPANS} AS s ON s.trace_id = run.trace_id AND s.span_id = run.span_id
            WHERE run.trace_id IN (SELECT value FROM json_each(:ids))
              AND s.status_code = 'ERROR' AND COALESCE(s.status_description, '') != ''
            ORDER BY s.start_unix_nano, s.rowid""",
        {"ids": json.dumps(list(trace_ids))},
    ):
        found = reasons.setdefault(row["trace_id"], [])
        if row["reason"] not in found:
            found.append(row["reason"])
    return reasons
