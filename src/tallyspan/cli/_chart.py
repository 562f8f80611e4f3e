"""The report page's chart, as inline SVG made here: model calls per stage and period, the violating
ones in red. No script, no library, nothing fetched: the page stays one file that opens offline.

One row per stage (small multiples, on one shared scale, so the rows compare), one bar per stage and
period with calls: the violating calls at its foot in red, the clean ones above them in grey. Every
text from the store is escaped (``markup``).
"""

from __future__ import annotations

import html
from datetime import datetime, timezone
from typing import Final

from tallyspan._store._store_timeline import StagePeriod, StageTimeline

__all__ = ["NO_STAGE", "markup", "period_label", "stage_chart"]

NO_STAGE: Final = "(no stage)"
"""How the chart names calls made outside any stage."""

_WIDTH: Final = 960
_LABEL_W: Final = 190
_RIGHT: Final = 16
_TOP: Final = 30
_ROW_H: Final = 58
_BAR_H: Final = 42
_AXIS_H: Final = 40
_MAX_BAR_W: Final = 28
_LABEL_CHARS: Final = 24
_TICKS: Final = 6
_NS_PER_S: Final = 1_000_000_000


def markup(value: object) -> str:
    """``value`` as text safe inside an element or a quoted attribute."""
    return html.escape(str(value), quote=True)


def period_label(start_unix_nano: int, period_ns: int) -> str:
    """A period's start, as precise as its length needs (UTC): ``2026-01-31``, ``01-31 09:15``,
    ``09:15:30`` or ``09:15:30.200``."""
    seconds, nanos = divmod(start_unix_nano, _NS_PER_S)
    moment = datetime.fromtimestamp(seconds, tz=timezone.utc)
    if period_ns >= 86400 * _NS_PER_S:
        return moment.strftime("%Y-%m-%d")
    if period_ns >= 60 * _NS_PER_S:
        return moment.strftime("%m-%d %H:%M")
    if period_ns >= _NS_PER_S:
        return moment.strftime("%H:%M:%S")
    return f"{moment.strftime('%H:%M:%S')}.{nanos // 1_000_000:03d}"


def _duration(period_ns: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        length = size * _NS_PER_S
        if period_ns >= length and period_ns % length == 0:
            return f"{period_ns // length} {unit}"
    return f"{period_ns // 1_000_000} ms"


def _stage_name(stage: str | None) -> str:
    return NO_STAGE if stage is None else stage


def _short(text: str) -> str:
    return text if len(text) <= _LABEL_CHARS else text[: _LABEL_CHARS - 1] + "…"


def stage_chart(timeline: StageTimeline) -> str:
    """The SVG of ``timeline``: one ``<g class="bar">`` per stage and period with calls; "" when it has
    no call."""
    if timeline.start_unix_nano is None or not timeline.points:
        return ""
    plot_w = _WIDTH - _LABEL_W - _RIGHT
    slot = plot_w / timeline.periods
    bar_w = max(1.0, min(_MAX_BAR_W, slot * 0.72))
    top_calls = max(point.calls for point in timeline.points)
    height = _TOP + _ROW_H * len(timeline.stages) + _AXIS_H
    by_stage: dict[str | None, list[StagePeriod]] = {}
    for point in timeline.points:
        by_stage.setdefault(point.stage, []).append(point)
    length = timeline.period_ns
    parts = [
        f'<svg class="chart" viewBox="0 0 {_WIDTH} {height}" width="100%" role="img" '
        f'xmlns="http://www.w3.org/2000/svg" aria-label="Model calls per stage and period, violating in red">',
        f'<g class="legend" transform="translate({_LABEL_W},12)">'
        '<rect x="0" y="-9" width="11" height="11" class="violating"/>'
        '<text x="16" y="1">violating calls</text>'
        '<rect x="130" y="-9" width="11" height="11" class="clean"/>'
        '<text x="146" y="1">clean calls</text>'
        f'<text x="{plot_w}" y="1" text-anchor="end" class="muted">one bar per '
        f"{markup(_duration(timeline.period_ns))} (UTC); bar height: calls, shared scale up to "
        f"{top_calls}</text></g>",
    ]
    for row, stage in enumerate(timeline.stages):
        points = by_stage.get(stage, [])
        base = _TOP + _ROW_H * row + _BAR_H + 4
        calls = sum(point.calls for point in points)
        violating = sum(point.violating for point in points)
        name = _stage_name(stage)
        parts.append(
            f'<g class="stage{" failing" if violating else ""}" data-stage="{markup(name)}">'
            f"<title>{markup(name)}: {violating} of {calls} calls violating</title>"
            f'<text x="0" y="{base - 22}" class="stage-name">{markup(_short(name))}</text>'
            f'<text x="0" y="{base - 4}" class="stage-sum">{violating} of {calls} violating</text>'
            f'<line x1="{_LABEL_W}" x2="{_WIDTH - _RIGHT}" y1="{base}" y2="{base}" class="baseline"/>'
        )
        for point in points:
            x = _LABEL_W + slot * point.period + (slot - bar_w) / 2
            total_h = _BAR_H * point.calls / top_calls
            bad_h = _BAR_H * point.violating / top_calls
            label = period_label(timeline.start_unix_nano + point.period * length, timeline.period_ns)
            parts.append(
                f'<g class="bar" data-stage="{markup(name)}" data-period="{point.period}" '
                f'data-calls="{point.calls}" data-violating="{point.violating}">'
                f"<title>{markup(name)}, {markup(label)}: {point.violating} of {point.calls} calls violating"
                "</title>"
                f'<rect x="{x:.1f}" y="{base - total_h:.1f}" width="{bar_w:.1f}" '
                f'height="{total_h - bad_h:.1f}" class="clean"/>'
                f'<rect x="{x:.1f}" y="{base - bad_h:.1f}" width="{bar_w:.1f}" height="{bad_h:.1f}" '
                'class="violating"/></g>'
            )
        parts.append("</g>")
    axis_y = _TOP + _ROW_H * len(timeline.stages) + 16
    parts.append('<g class="axis">')
    step = max(1, -(-timeline.periods // _TICKS))
    for period in range(0, timeline.periods, step):
        x = _LABEL_W + slot * period + slot / 2
        label = period_label(timeline.start_unix_nano + period * length, timeline.period_ns)
        parts.append(f'<text x="{x:.1f}" y="{axis_y}" text-anchor="middle">{markup(label)}</text>')
    parts.append("</g></svg>")
    return "".join(parts)
