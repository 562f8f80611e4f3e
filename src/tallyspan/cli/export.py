"""``tallyspan export``: the failures as data sets, from the store or from an OTLP JSON file.

::

    tallyspan export --format failure-logs failures.jsonl             # + README.md, the dataset card
    tallyspan export --format failure-logs out.jsonl --since 7d --stage weekly_report --class timeout
    tallyspan export --format diagnosis runs.jsonl --otlp-file traces.json
    tallyspan export --format diagnosis runs.jsonl --judge http://127.0.0.1:8000/v1 --judge-model qwen3

Both read one trace at a time (the store through ``_store_queries.iter_traces``, a file through
``OTLPFileReader``), write one JSON object per line, and show a progress bar on a terminal. The record
schemas are ``tallyspan/_datasets/schemas/*.schema.json``; docs/datasets.md says what each field means.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Final, TextIO

import click
from tqdm import tqdm

from tallyspan._contract._contracts import ContractSet
from tallyspan._contract_loading import load_contracts
from tallyspan._datasets._diagnosis import diagnosis_records
from tallyspan._datasets._failure_logs import (
    CARD_MARKER,
    CardStats,
    FailureFilter,
    failure_records,
    render_card,
)
from tallyspan._datasets._judge import Judge
from tallyspan._datasets._otlp_file import OTLPFileReader
from tallyspan._engine._taxonomy import FailureClass, ViolationType
from tallyspan._errors import ConfigError
from tallyspan._store._store_queries import count_traces, iter_traces, open_store
from tallyspan._store._store_traces import TraceData
from tallyspan.cli._render import emit, table
from tallyspan.cli._state import CliState, pass_state
from tallyspan.cli.prune import parse_age

__all__ = ["DIAGNOSIS", "FAILURE_LOGS", "ExportResult", "command", "export", "parse_when"]

FAILURE_LOGS: Final = "failure-logs"
DIAGNOSIS: Final = "diagnosis"
CARD_NAME: Final = "README.md"
_MAX_UNIX_NANO: Final = 2**63 - 1
_CARD_HEAD_LINES: Final = 12  # the front matter, then the marker


@dataclass
class ExportResult:
    """What an export wrote."""

    format: str
    out: str
    source: str
    traces: int = 0
    records: int = 0
    card: str | None = None
    judged: int = 0
    by_class: dict[str, int] = field(default_factory=dict)
    skipped_lines: int = 0
    """OTLP file lines that were not JSON."""
    split_traces: int = 0
    """OTLP file traces emitted before all their spans were read (the memory bound)."""


def parse_when(text: str, option: str) -> int:
    """Unix nanoseconds of ``--since``/``--until``: an ISO-8601 time (UTC unless it says otherwise) or an
    age before now (``90m``, ``36h``, ``7d``, ``2w``).

    Raises:
        click.BadParameter: neither.
    """
    stripped = text.strip()
    try:
        # "Z" or "z" (RFC 3339 allows either) is UTC; Python 3.10's fromisoformat takes neither.
        moment = datetime.fromisoformat(
            stripped[:-1] + "+00:00" if stripped.endswith(("Z", "z")) else stripped
        )
    except ValueError:
        try:
            seconds = parse_age(text)
        except click.BadParameter:
            raise click.BadParameter(
                f"{text!r} is neither an ISO-8601 time (2026-05-01T09:00Z) nor an age (7d)", param_hint=option
            ) from None
        return _clamped((time.time() - seconds) * 1e9)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return _clamped(moment.timestamp() * 1e9)


def _clamped(unix_nano: float) -> int:
    # Span times are signed 64-bit nanoseconds (to the year 2262): a later bound means "no end".
    return max(0, min(int(unix_nano), _MAX_UNIX_NANO))


def _check_names(values: tuple[str, ...], known: set[str], what: str) -> frozenset[str]:
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown {what} {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return frozenset(values)


@dataclass
class _Source:
    """The traces of the store or of an OTLP file, and how the progress bar counts them."""

    name: str
    total: int | None
    unit: str
    traces: Callable[[Callable[[int], object]], Iterator[TraceData]]
    reader: OTLPFileReader | None = None


def _store_source(stack: ExitStack, db_path: Path, keep: FailureFilter) -> _Source:
    db = stack.enter_context(open_store(db_path))
    total = count_traces(db, keep.since, keep.until)

    def traces(advance: Callable[[int], object]) -> Iterator[TraceData]:
        for trace in iter_traces(db, keep.since, keep.until):
            advance(1)
            yield trace

    return _Source(f"the store {db_path}", total, "trace", traces)


def _file_source(path: Path) -> _Source:
    if not path.is_file():
        raise ConfigError(f"no OTLP JSON file at {path}")
    reader = OTLPFileReader(path)

    def traces(advance: Callable[[int], object]) -> Iterator[TraceData]:
        reader.on_bytes = advance
        yield from reader

    # A gzip file's size is not what is read: count lines' bytes against the plain size only.
    total = None if path.suffix == ".gz" else path.stat().st_size
    return _Source(f"the OTLP JSON file {path}", total, "B", traces, reader)


def _card_path(out: Path, card: Path | None) -> Path:
    path = card if card is not None else out.parent / CARD_NAME
    if path.exists():
        with path.open(encoding="utf-8", errors="replace") as existing:
            head = [existing.readline().rstrip("\n") for _ in range(_CARD_HEAD_LINES)]
            if CARD_MARKER not in head:
                raise ConfigError(
                    f"{path} exists and was not written by tallyspan export: not overwriting it "
                    "(choose another folder for OUT, or --card PATH)"
                )
    return path


def _write_line(out: TextIO, record: dict[str, Any]) -> None:
    out.write(json.dumps(record, ensure_ascii=False))
    out.write("\n")


def _diagnosis_kept(record: dict[str, Any], keep: FailureFilter) -> bool:
    diagnosis = record["diagnosis"]
    start = record["run"]["start"]
    at = parse_when(start, "start") if start else None
    stages = {step["stage"] for step in record["steps"] if step["stage"]}
    types = {evidence["type"] for evidence in diagnosis["evidence"]}
    return (
        keep.keeps_time(at)
        and (not keep.stages or not keep.stages.isdisjoint(stages))
        and (not keep.types or not keep.types.isdisjoint(types))
        and (not keep.classes or diagnosis["failure_class"] in keep.classes)
    )


def export(
    format_name: str,
    out: Path,
    *,
    db_path: Path,
    otlp_file: Path | None = None,
    keep: FailureFilter | None = None,
    contracts: ContractSet | None = None,
    card: Path | None = None,
    judge: Judge | None = None,
    progress: bool = False,
) -> ExportResult:
    """Write the ``format_name`` records of the store (or of ``otlp_file``) to ``out``.

    The records go to a temporary file beside ``out`` that replaces it at the end, so an interrupted
    export leaves the previous file whole. For failure logs the dataset card is written too.

    Raises:
        StoreNotFoundError: no store at ``db_path`` (and no ``otlp_file``).
        ConfigError: the OTLP file or the card path cannot be used.
    """
    keep = keep or FailureFilter()
    stats = CardStats()
    with ExitStack() as stack:
        source = _file_source(otlp_file) if otlp_file is not None else _store_source(stack, db_path, keep)
        card_path = _card_path(out, card) if format_name == FAILURE_LOGS else None
        result = ExportResult(format_name, str(out), source.name, card=str(card_path) if card_path else None)
        bar = stack.enter_context(
            tqdm(
                total=source.total,
                unit=source.unit,
                unit_scale=source.unit == "B",
                desc=f"export {format_name}",
                disable=not progress,
                file=sys.stderr,
                leave=False,
            )
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(f".{out.name}.partial")
        with partial.open("w", encoding="utf-8") as sink:
            for trace in source.traces(bar.update):
                result.traces += 1
                if format_name == FAILURE_LOGS:
                    for record in failure_records(trace, keep, contracts):
                        _write_line(sink, record)
                        stats.add(record)
                        result.records += 1
                    continue
                for record in diagnosis_records(trace, contracts):
                    if not _diagnosis_kept(record, keep):
                        continue
                    if judge is not None:
                        record["judged"] = judge.judge(record)
                        result.judged += 1
                    _write_line(sink, record)
                    name = record["diagnosis"]["failure_class"] or "(none)"
                    result.by_class[name] = result.by_class.get(name, 0) + 1
                    result.records += 1
        os.replace(partial, out)
        if source.reader is not None:
            result.skipped_lines = source.reader.stats.bad_lines
            result.split_traces = source.reader.stats.evicted_traces
    if card_path is not None:
        result.by_class = dict(stats.by_class)
        card_text = render_card(stats, data_file=out.name, source=source.name, filters=keep.describe())
        card_path.write_text(card_text, encoding="utf-8")
    return result


def format_result(result: ExportResult) -> str:
    """The export's summary as text."""
    lines = [
        f"tallyspan export {result.format} — {result.records} records from {result.traces} traces "
        f"of {result.source}",
        f"  written to {result.out}" + (f"; dataset card {result.card}" if result.card else ""),
    ]
    if result.judged:
        lines.append(f"  {result.judged} runs judged")
    if result.skipped_lines:
        lines.append(f"  {result.skipped_lines} lines of the file were not JSON and were skipped")
    if result.split_traces:
        lines.append(f"  {result.split_traces} traces were exported before all their spans were read")
    lines.append(table(["failure class", "records"], sorted(result.by_class.items())))
    return "\n".join(lines)


@click.command("export")
@click.argument("out", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--format", "format_name", type=click.Choice([FAILURE_LOGS, DIAGNOSIS]), required=True,
    help="failure-logs: one record per failure (+ dataset card); diagnosis: one per failed run.",
)  # fmt: skip
@click.option(
    "--otlp-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="Read an OTLP JSON file (the collector's file exporter) instead of the store.",
)  # fmt: skip
@click.option("--since", metavar="WHEN", help="Only failures from then on: an ISO-8601 time or an age (7d).")
@click.option("--until", metavar="WHEN", help="Only failures before then: an ISO-8601 time or an age.")
@click.option("--stage", "stages", multiple=True, metavar="NAME", help="Only this stage (repeatable).")
@click.option(
    "--type", "types", multiple=True, metavar="TYPE", help="Only records with this type (repeatable)."
)
@click.option(
    "--class", "classes", multiple=True, metavar="CLASS", help="Only this failure class (repeatable)."
)
@click.option(
    "--contracts", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
    help="The contracts the spans were checked against: named patterns are shown with their regexes.",
)  # fmt: skip
@click.option(
    "--card", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help=f"Where the dataset card goes. [default: {CARD_NAME} beside OUT]",
)  # fmt: skip
@click.option(
    "--judge", "judge_url", metavar="URL", help="Also ask this OpenAI-compatible endpoint (diagnosis)."
)
@click.option("--judge-model", metavar="NAME", help="The model --judge asks.")
@click.option("--progress/--no-progress", default=None, help="Show a progress bar. [default: on a terminal]")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of text.")
@pass_state
def command(
    state: CliState,
    out: Path,
    format_name: str,
    otlp_file: Path | None,
    since: str | None,
    until: str | None,
    stages: tuple[str, ...],
    types: tuple[str, ...],
    classes: tuple[str, ...],
    contracts: Path | None,
    card: Path | None,
    judge_url: str | None,
    judge_model: str | None,
    progress: bool | None,
    as_json: bool,
) -> None:
    """Export the recorded failures as a data set: failure logs, or error-diagnosis records."""
    if (judge_url is None) != (judge_model is None):
        raise ConfigError("--judge and --judge-model go together")
    if judge_url is not None and format_name != DIAGNOSIS:
        raise ConfigError("--judge applies to --format diagnosis")
    if card is not None and format_name != FAILURE_LOGS:
        raise ConfigError("--card applies to --format failure-logs")
    keep = FailureFilter(
        since=parse_when(since, "--since") if since else None,
        until=parse_when(until, "--until") if until else None,
        stages=frozenset(stages),
        types=_check_names(types, {member.value for member in ViolationType}, "type"),
        classes=_check_names(classes, {member.value for member in FailureClass}, "failure class"),
    )
    judge = Judge(judge_url, judge_model) if judge_url is not None and judge_model is not None else None
    try:
        result = export(
            format_name,
            out,
            db_path=state.db_path,
            otlp_file=otlp_file,
            keep=keep,
            contracts=load_contracts(contracts) if contracts is not None else None,
            card=card,
            judge=judge,
            progress=sys.stderr.isatty() if progress is None else progress,
        )
    finally:
        if judge is not None:
            judge.close()
    emit("export", result, as_json=as_json, text=format_result)
