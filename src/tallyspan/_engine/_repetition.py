"""degenerate_repetition: output that loops, one unit repeated back to back until the token limit.

The measure is the share of the text covered by runs of one unit (1 to ``MAX_UNIT_CHARS`` characters:
a phrase, a sentence, a template token, ``#``) repeated at least ``MIN_COPIES`` times back to back.
More than ``Contract.max_repeated_share`` of the text (default: more than half) is a loop.

Finding every repeated unit at every position is quadratic, so the candidates come from a fixed number
of evenly spaced probes instead: inside a loop that covers half the text, most probes land in a run,
and the next occurrence of the few characters at the probe (``str.find`` within one unit's reach)
gives the unit. Each candidate's runs are then measured exactly with ``str.find``/``str.startswith``.
Everything is linear in the text, with compiled primitives doing the scanning.

A closed code block is set aside: repeating lines there (a table of zeros, ``pass`` in every branch)
is the deliverable. A block the model never closed is measured, since that is how a loop inside code
ends (at the token limit). Lists, tables and poems are measured like any text; their repeats (a
refrain, a separator row) are short runs or a few copies, far from half the text.
"""

from __future__ import annotations

import re

from tallyspan._engine._scripts import SCAN_MODULE, has_fence

__all__ = ["MAX_UNIT_CHARS", "MIN_COPIES", "repeated_share"]

#: Longest unit looked for (a sentence or two of Japanese, a paragraph of template debris).
MAX_UNIT_CHARS = 256
#: A run needs this many back-to-back copies of its unit: two copies are an echo, not a loop.
MIN_COPIES = 3
#: Shorter runs are emphasis ("！！！", "---"), not a loop, whatever their share of a short text.
MIN_RUN_CHARS = 20

_PROBES = 16
_PROBE_CHARS = 4
_TRIES_PER_PROBE = 4
_GALLOP_COPIES = 16
_CLOSED_FENCE = re.compile(r"(?ms)^[ \t]*(```|~~~)[^\n]*\n.*?^[ \t]*\1[ \t]*$")


def _primitive(unit: str) -> str:
    """The shortest unit that repeats to ``unit`` ("abab" -> "ab")."""
    period = (unit + unit).find(unit, 1)
    return unit[:period]


def _candidate_units(text: str) -> set[str]:
    """Units that repeat back to back at one of the probes."""
    if SCAN_MODULE is not None:  # the same probes in C (tallyspan/_engine/_scan.c)
        found = SCAN_MODULE.repeat_units(text, _PROBES, _PROBE_CHARS, MAX_UNIT_CHARS, _TRIES_PER_PROBE)
        return {_primitive(text[start:end]) for start, end in found}
    return python_candidate_units(text)


def python_candidate_units(text: str) -> set[str]:
    """``_candidate_units`` without the C module (the same units)."""
    units: set[str] = set()
    length = len(text)
    find, startswith = text.find, text.startswith
    for index in range(_PROBES):
        start = (2 * index + 1) * length // (2 * _PROBES)
        end = start + _PROBE_CHARS
        if end > length:
            continue
        gram = text[start:end]
        reach = end + MAX_UNIT_CHARS
        found = find(gram, start + 1, reach)
        tries = 1
        # Most probes end here: the characters at the probe do not come again within a unit's reach.
        while found >= 0:
            if startswith(text[start:found], found):
                units.add(_primitive(text[start:found]))
                break
            if tries == _TRIES_PER_PROBE:
                break
            tries += 1
            found = find(gram, found + 1, reach)
    return units


def _shortest_first(unit: str) -> tuple[int, str]:
    return len(unit), unit


def _common_prefix(first: str, second: str) -> int:
    """Length of the common prefix, by bisection on slice comparisons (done in C)."""
    low, high = 0, min(len(first), len(second))
    while low < high:
        middle = (low + high + 1) // 2
        if first[:middle] == second[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def _covered(text: str, unit: str) -> int:
    """Characters of ``text`` in runs of at least MIN_COPIES back-to-back copies of ``unit``.

    A run reaches as far as the text keeps the unit's period, so a loop cut off mid-unit (at the
    token limit) or entered mid-unit counts whole.
    """
    size = len(unit)
    run_start = unit * max(MIN_COPIES, -(-MIN_RUN_CHARS // size))
    block = unit * _GALLOP_COPIES
    reversed_unit = unit[::-1]
    total = 0
    start = text.find(run_start)
    while start >= 0:
        end = start + len(run_start)
        while text.startswith(block, end):
            end += len(block)
        while text.startswith(unit, end):
            end += size
        end += _common_prefix(text[end : end + size], unit)
        first = start - _common_prefix(text[max(start - size, 0) : start][::-1], reversed_unit)
        if end - first >= MIN_RUN_CHARS:
            total += end - first
        start = text.find(run_start, end)
    return total


def repeated_share(text: str) -> tuple[float, int]:
    """Return (share of ``text`` that is one unit repeated back to back, that unit's length).

    Closed code blocks count in the length of the text but never as repetition. (0.0, 0) when no
    unit repeats.
    """
    # Whitespace padding at either end (hundreds of newlines after the answer) is no phrase of it: the
    # share is of the text between, and a unit of whitespace alone never counts.
    text = text.strip()
    length = len(text)
    if length < MIN_RUN_CHARS:
        return 0.0, 0
    if has_fence(text):
        text = _CLOSED_FENCE.sub("\x00", text)
    best, best_unit = 0, 0
    # Every candidate is measured (a bound from ``str.count`` misses the part-units at a run's ends), in
    # a fixed order: of two units that cover as much, the shorter is named, whatever the hash seed.
    for unit in sorted(_candidate_units(text), key=_shortest_first):
        if unit.isspace():
            continue
        covered = _covered(text, unit)
        if covered > best:
            best, best_unit = covered, len(unit)
    return best / length, best_unit
