"""``tallyspan export --otlp-file`` on hostile JSON, as a real process: nesting 100,000 deep, values of
the wrong type and a 98 MB line each end in one line naming the file, the line and the reason, exit 2
(bad input), in bounded memory (peak RSS measured by the process that waits for it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tallyspan._datasets._otlp_file import MAX_DEPTH, MAX_LINE_CHARS

GOOD = json.dumps(
    {
        "resourceSpans": [
            {"scopeSpans": [{"spans": [{"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "x"}]}]}
        ]
    }
)
#: Peak RSS of the export at most this (KiB): the interpreter and the command take about 60 MB; reading
#: the 98 MB line whole took 758 MB.
PEAK_KIB = 150 * 1024
_MEASURE = (
    "import resource, subprocess, sys; "
    "done = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
    "sys.stdout.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) + '\\n'); "
    "sys.stdout.write(str(done.returncode) + '\\n' + done.stderr)"
)


def _export(path: Path, out: Path) -> tuple[int, str, int]:
    """Run the export in a process of its own; (exit code, stderr, its peak RSS in KiB)."""
    measured = subprocess.run(
        [sys.executable, "-c", _MEASURE, sys.executable, "-m", "tallyspan", "export", "--otlp-file", str(path),
         "--format", "failure-logs", str(out)],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    peak, code, stderr = measured.stdout.split("\n", 2)
    return int(code), stderr, int(peak)


def _span(number: int, **fields: object) -> dict[str, object]:
    return {"traceId": f"{number:032x}", "spanId": f"{number:016x}", "name": "chat qwen3", **fields}


@pytest.mark.parametrize(
    ("second_line", "reason"),
    [
        ("[" * 100_000 + "]" * 100_000, f"nested deeper than {MAX_DEPTH} levels"),
        ('{"a": ' * 100_000 + "1" + "}" * 100_000, f"nested deeper than {MAX_DEPTH} levels"),
        (
            json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [_span(1, flags="lots")]}]}]}),
            "not OTLP/JSON: ValueError: invalid literal for int() with base 10: 'lots'",
        ),
        (
            json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [_span(1, status="ERROR")]}]}]}),
            "not OTLP/JSON: AttributeError: 'str' object has no attribute 'get'",
        ),
        (
            json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [_span(1, events=7)]}]}]}),
            "not OTLP/JSON: TypeError: 'int' object is not iterable",
        ),
    ],
    ids=["deep arrays", "deep objects", "flags not a number", "status not an object", "events not a list"],
)
def test_hostile_lines_are_refused_with_the_line_and_the_reason(
    tmp_path: Path, second_line: str, reason: str
) -> None:
    path = tmp_path / "traces.jsonl"
    path.write_text(GOOD + "\n" + second_line + "\n", encoding="utf-8")
    code, stderr, _ = _export(path, tmp_path / "out" / "failures.jsonl")
    assert (code, stderr) == (2, f"Error: {path}, line 2: {reason}\n")
    assert not (tmp_path / "out" / "failures.jsonl").exists()


def test_a_98_mb_line_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "huge.jsonl"
    span = json.dumps(
        _span(7, parentSpanId="ef" * 8, attributes=[{"key": "k", "value": {"stringValue": "v" * 200}}])
    )
    count = 98_000_000 // (len(span) + 1) + 1000
    with path.open("w", encoding="utf-8") as out:
        out.write(GOOD + "\n")
        out.write('{"resourceSpans": [{"scopeSpans": [{"spans": [')
        for _ in range(count // 1000):
            out.write(",".join([span] * 1000) + ",")
        out.write(span + "]}]}]}\n")
    assert path.stat().st_size > 98_000_000
    code, stderr, peak = _export(path, tmp_path / "failures.jsonl")
    assert (code, stderr) == (
        2, f"Error: {path}, line 2: longer than {MAX_LINE_CHARS} characters; not read further\n"
    )  # fmt: skip
    assert peak < PEAK_KIB, f"peak RSS {peak} KiB"


def test_lines_the_reader_skips_today_are_still_skipped(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    path.write_text(GOOD + "\nnot json\n[1, 2]\n\n" + GOOD + "\n", encoding="utf-8")
    code, stderr, _ = _export(path, tmp_path / "failures.jsonl")
    assert (code, stderr) == (0, "")
