"""Hostile contract files are refused fast, in bounded memory, with a ContractError that says where.

Each file is loaded in a child process under a memory limit (``RLIMIT_AS``) and a timeout: before
these limits existed, these files made ``load_contracts`` block for seconds to minutes, grow to
gigabytes, crash the interpreter, or raise a bare ``RecursionError``/``UnicodeDecodeError``/
``ValueError`` naming no file. The child reports what was raised, how long the load took and how much
its peak memory grew.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tallyspan
from tallyspan import Contract, ContractError, check, load_contracts
from tallyspan._contract._patterns import PATTERN_BUDGET_ERROR, PATTERN_BUDGET_S, PatternBudget

MEMORY_LIMIT = 512 << 20
"""Address space of the child: the interpreter with tallyspan imported uses about 50 MB of it."""
TIMEOUT_S = 20.0
"""Kill the child after this long: a hang is a failure, not a stuck test run."""
FAST_S = 1.0
"""What 'refused fast' means, measured around load_contracts in the child."""
SMALL_GROWTH_KB = 30_000
"""What 'in bounded memory' means: the child's peak RSS may grow this much while loading."""

_CHILD = textwrap.dedent(
    """
    import json, os, resource, sys, tempfile, time
    resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
    import tallyspan
    load_contracts = tallyspan.load_contracts
    # What the first load imports (the YAML reader, the contract model: 0.4 s of CPU at the floors, over
    # 1 s on a loaded runner) is not part of the cost: one well-formed file first.
    with tempfile.TemporaryDirectory() as folder:
        warm = os.path.join(folder, "contracts.yaml")
        with open(warm, "w") as file:
            file.write("contracts:\\n  warm:\\n    min_chars: 3\\n    forbidden: [{{name: x, pattern: 'x+y'}}]\\n")
        load_contracts(warm)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # The CPU the load took, not the wall clock: a busy runner must not fail it, a blow-up still does.
    started = time.process_time()
    try:
        load_contracts(sys.argv[1])
        outcome = {{"raised": None}}
    except tallyspan.ContractError as exc:
        outcome = {{"raised": "ContractError", "message": str(exc), "file": exc.file, "stage": exc.stage,
                   "field": exc.field, "line": exc.line}}
    except BaseException as exc:
        outcome = {{"raised": type(exc).__name__, "message": str(exc)[:300]}}
    outcome["seconds"] = time.process_time() - started
    outcome["growth_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps(outcome))
    """
)


def _load_in_child(path: Path | str, **environ: str) -> dict[str, Any]:
    """load_contracts(path) in a child with a memory limit and a timeout; what it raised, and its cost."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **environ}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD.format(limit=MEMORY_LIMIT), str(path)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"load_contracts({path}) still running after {TIMEOUT_S} s")
    assert done.returncode == 0, f"the child died (status {done.returncode}): {done.stderr[-2000:]}"
    outcome: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return outcome


def _refused(
    path: Path | str,
    *,
    says: str,
    stage: str | None = None,
    field: str | None = None,
    line: int | None = None,
    fast_s: float = FAST_S,
    **environ: str,
) -> dict[str, Any]:
    outcome = _load_in_child(path, **environ)
    assert outcome["raised"] == "ContractError", outcome
    assert outcome["file"] == str(path)
    assert str(path) in outcome["message"]
    assert says in outcome["message"], outcome["message"]
    assert outcome["stage"] == stage, outcome
    assert outcome["field"] == field or (field is not None and outcome["field"].startswith(field)), outcome
    if line is not None:
        assert outcome["line"] == line, outcome
    assert outcome["seconds"] < fast_s, outcome
    assert outcome["growth_kb"] < SMALL_GROWTH_KB, outcome
    return outcome


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _with_pattern(tmp_path: Path, pattern: str) -> Path:
    return _write(
        tmp_path, "contracts.yaml", f"contracts:\n  report:\n    required:\n      - {json.dumps(pattern)}\n"
    )


# --- patterns: checked before they are compiled ------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        # 31 characters that asked the compiler for a billion nodes: 10-21 s, then 6-8 GB.
        ("(?:(?:(?:a{1000}){1000}){1000})", "counted repetitions that unroll to more than 10,000 nodes"),
        ("a{1000000}", "counted repetitions that unroll"),  # 270 MB for one pattern
        ("(?:ab|cd){300000}", "counted repetitions that unroll"),  # crashed the interpreter (SIGSEGV)
        ("|".join(f"word{i}" for i in range(300_000)), "longer than 10,000 characters"),  # 42 s
        ("|".join(f"w{i}" for i in range(1_500)), "more than 1,000 alternatives"),
        ("(" * 400 + "a" + ")" * 400, "nests deeper than 50 levels"),  # a bare RecursionError
    ],
    ids=[
        "nested-counts",
        "one-large-count",
        "interpreter-crash",
        "300k-alternatives",
        "alternatives",
        "nesting",
    ],
)
def test_a_pattern_that_would_cost_too_much_to_compile_is_refused_uncompiled(
    tmp_path: Path, pattern: str, says: str
) -> None:
    path = _with_pattern(tmp_path, pattern)
    # The 300k alternatives take 3 MB: a larger file limit, so the pattern check is what refuses it.
    outcome = _refused(
        path, says=says, stage="report", field="required", line=3, TALLYSPAN_CONTRACTS_MAX_BYTES=str(8 << 20)
    )
    assert "(item 0)" in outcome["message"]
    assert len(outcome["message"]) < 600  # the pattern is quoted, shortened


def test_patterns_over_the_load_budget_are_refused(tmp_path: Path) -> None:
    stages = "".join(f"  s{i}:\n    forbidden: ['x{i}y', 'z{i}w']\n" for i in range(2_600))
    _refused(
        _write(tmp_path, "contracts.yaml", f"contracts:\n{stages}"),
        says="more than 5,000 patterns",
        stage="s2500",
        field="forbidden",
        fast_s=5.0,  # 5,000 small patterns are compiled before the 5,001st is refused
    )


def test_ordinary_patterns_still_load_including_regex_only_syntax() -> None:
    contract = Contract(
        required=[r"^判定[:：]\s*(合格|不合格)", r"[\p{Han}\p{Hiragana}]{1,200}", r"(?x) a b  # spaced"],
        forbidden=[r"[[a-z]--[aeiou]]{3}", r"(?:foo){e<=1}", r".{0,100000}", r"(?:\w+\s*){20}"],
    )
    assert len(contract.required_patterns) == 3
    assert len(contract.forbidden_patterns) == 4
    result = check("判定：合格\nab", contract)
    assert result.violation_types == ("forbidden_present",)  # .{0,100000} matches anything
    assert result.check_errors == ()


# --- files: read within bounds ------------------------------------------------------------------------


def test_a_70_mb_file_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "contracts.yaml"
    with path.open("w", encoding="utf-8") as stream:
        line = "# " + "x" * 1_000 + "\n"
        for _ in range(70_000):
            stream.write(line)
    assert path.stat().st_size > 70_000_000
    _refused(
        path, says="more than the limit of 1,048,576 (TALLYSPAN_CONTRACTS_MAX_BYTES sets it); refused unread"
    )


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "contracts.yaml"
    os.mkfifo(path)
    return path


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(), reason="POSIX files")
@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda tmp_path: Path("/dev/zero"), "a character device"),
        (_fifo, "a FIFO"),  # opening it waited for ever for a writer
        (lambda tmp_path: tmp_path, "a directory"),
    ],
    ids=["dev-zero", "fifo", "directory"],
)
def test_anything_but_a_regular_file_is_refused_unopened(
    tmp_path: Path, make: Callable[[Path], Path], kind: str
) -> None:
    _refused(make(tmp_path), says=f"is {kind}, not a regular file; refused unread")


@pytest.mark.parametrize(
    ("encoded", "says", "line"),
    [
        (
            "contracts:\n  report:\n    forbidden: ['café']\n".encode("latin-1"),
            "not UTF-8: byte 0xe9 at line 3",
            3,
        ),
        ("contracts:\n  report:\n    min_chars: 5\n".encode("utf-16"), "is UTF-16 text; save it as UTF-8", 1),
        ("contracts:\n  report:\n    min_chars: 5\n".encode("utf-16-le"), "holds NUL bytes", 1),
    ],
    ids=["latin-1", "utf-16", "utf-16-without-bom"],
)
def test_a_file_that_is_not_utf8_is_named_as_such(
    tmp_path: Path, encoded: bytes, says: str, line: int
) -> None:
    path = tmp_path / "contracts.yaml"
    path.write_bytes(encoded)
    _refused(path, says=says, line=line)


def test_a_utf8_byte_order_mark_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "contracts.toml"
    path.write_bytes(b"\xef\xbb\xbf[contracts.report]\nmin_chars = 5\n")
    assert load_contracts(path).contracts["report"].min_chars == 5


# --- nesting, numbers, aliases: bounded while parsing -------------------------------------------------


def test_deeply_nested_yaml_names_the_stage_and_field(tmp_path: Path) -> None:
    deep = "[" * 5_000 + "]" * 5_000
    path = _write(tmp_path, "contracts.yaml", f"contracts:\n  report:\n    json_schema: {{items: {deep}}}\n")
    # libyaml stops at its own depth limit; the pure-Python parser at ours (32): both name the place.
    _refused(path, says="nested", stage="report", field="json_schema.items", line=3)


def test_deeply_nested_toml_names_the_stage_and_field(tmp_path: Path) -> None:
    deep = "[" * 5_000 + "]" * 5_000
    path = _write(tmp_path, "contracts.toml", f"[contracts.report]\nmin_chars = 1\njson_schema = {deep}\n")
    _refused(path, says="nested too deeply", stage="report", field="json_schema", line=3)


def test_toml_nested_within_pythons_reach_is_still_bounded(tmp_path: Path) -> None:
    deep = "[" * 60 + "]" * 60
    path = _write(tmp_path, "contracts.toml", f"[contracts.report]\njson_schema = {{items = {deep}}}\n")
    with pytest.raises(ContractError, match="nested deeper than 32 levels") as raised:
        load_contracts(path)
    assert (raised.value.stage, raised.value.file) == ("report", str(path))
    assert raised.value.field is not None
    assert raised.value.field.startswith("json_schema.items.0.0")


def test_a_5000_digit_integer_in_yaml_names_the_stage_and_field(tmp_path: Path) -> None:
    path = _write(
        tmp_path, "contracts.yaml", f"contracts:\n  report:\n    language: ja\n    min_chars: {'9' * 5_000}\n"
    )
    _refused(path, says="a number of 5,000 characters", stage="report", field="min_chars", line=4)


def test_a_5000_digit_integer_in_toml_names_the_stage_and_field(tmp_path: Path) -> None:
    path = _write(
        tmp_path, "contracts.toml", f"[contracts.report]\nlanguage = 'ja'\nmax_chars = {'9' * 5_000}\n"
    )
    _refused(path, says="a number of more than 4,300 digits", stage="report", field="max_chars", line=3)


def test_a_number_beyond_64_bits_is_refused_from_any_source(tmp_path: Path) -> None:
    path = _write(tmp_path, "contracts.toml", f"[contracts.report]\nmax_chars = {'9' * 100}\n")
    with pytest.raises(ContractError, match="larger than 64 bits") as raised:
        load_contracts(path)
    assert (raised.value.stage, raised.value.field) == ("report", "max_chars")
    with pytest.raises(ContractError, match="larger than 64 bits"):
        load_contracts({"report": {"min_chars": 10**30}})


def test_an_alias_bomb_is_refused_while_loading(tmp_path: Path) -> None:
    """Nine levels of nine aliases: 387 million values. It used to load in 20 ms, then ``repr()`` of
    the contracts (a log line, a debugger, ``model_dump``) ran for 39 s into a MemoryError."""
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 10):
        levels.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 9) + "]")
    text = "contracts:\n  report:\n    json_schema:\n      $defs:\n"
    text += "".join(f"        {entry}\n" for entry in levels) + "      enum: *a9\n"
    _refused(
        _write(tmp_path, "contracts.yaml", text),
        says="more than 100,000 values (aliases counted each time they are used)",
        stage="report",
        field="json_schema",
    )


def test_a_value_the_yaml_constructor_cannot_build_names_the_field(tmp_path: Path) -> None:
    path = _write(
        tmp_path, "contracts.yaml", "contracts:\n  report:\n    min_chars: 3\n    language: 2020-13-45\n"
    )
    _refused(path, says="cannot read this value: ValueError", stage="report", field="language", line=4)


# --- the run-time budget: all of a contract's patterns together --------------------------------------


def test_forty_catastrophic_patterns_share_one_budget_per_span() -> None:
    forbidden: list[Any] = [{"name": f"slow{i}", "pattern": rf"(x+x+)+y{i}"} for i in range(40)]
    contract = Contract(
        forbidden=forbidden, max_repeated_share=None
    )  # "x" * 5000 loops: not this test's point
    tallyspan.reset_stats()
    # The budget is the checking thread's CPU time: measured so, a busy runner cannot fail it.
    started = time.thread_time()
    result = check("x" * 5_000, contract)
    elapsed = time.thread_time() - started
    assert elapsed < PATTERN_BUDGET_S + 0.5  # it was 5-6 s: 40 patterns x 0.1 s each, and more
    assert result.check_errors == (PATTERN_BUDGET_ERROR,)
    assert len(result.violations) == 40  # each pattern unverified, as for one timeout
    assert {violation.detail for violation in result.violations} == {
        f"pattern 'slow{i}' timed out; not verified" for i in range(40)
    }
    assert tallyspan.stats()["errors.check_budget"] == 1


def test_a_span_within_its_budget_has_no_check_errors() -> None:
    # One pattern timing out (0.1 s) leaves budget for the others; a generous total keeps the test
    # independent of a loaded machine, where a 0.1 s timeout can take longer than the default total.
    contract = Contract(required=[r"^(a+)+$"], forbidden=[r"forbidden"], max_repeated_share=None)
    tallyspan.reset_stats()
    budget = PatternBudget(total_s=30.0)
    [(_, slow)] = contract.required_patterns
    [(_, quick)] = contract.forbidden_patterns
    assert budget.search(slow, "a" * 5_000 + "!") is None  # timed out: not verified
    assert budget.search(quick, "a" * 5_000 + "!") is False  # still run: the budget is not spent
    assert budget.check_errors == ()
    assert "errors.check_budget" not in tallyspan.stats()
    assert check("fine", Contract(required=["fine"])).check_errors == ()


def test_a_busy_app_thread_does_not_make_quick_patterns_time_out() -> None:
    # The checks run on a worker thread. A pattern search there that lets go of the GIL must win it back
    # from the app's thread, which may keep it for the whole switch interval: the regex timeout counted
    # that wait, and the contract's patterns "timed out" (not verified) on outputs they match in
    # microseconds whenever the app was busy.
    contract = Contract(
        required=[r"^判定[:：]\s*(合格|不合格)"], forbidden=[r"<\|im_end\|>"], max_repeated_share=None
    )
    output = "判定：合格\n" + "今週は問い合わせ対応の流れを見直しました。" * 40
    results: list[tallyspan.CheckResult] = []

    def checks() -> None:
        results.extend(check(output, contract) for _ in range(3))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.5)  # longer than REGEX_TIMEOUT_S: a search that waits for the GIL times out
    tallyspan.reset_stats()
    worker = threading.Thread(target=checks)
    try:
        worker.start()
        while worker.is_alive():  # the app's thread, busy in Python code
            pass
    finally:
        sys.setswitchinterval(interval)
        worker.join()
    assert [result.check_errors for result in results] == [()] * 3
    assert [result.violations for result in results] == [()] * 3
    assert "checks.regex_timeout" not in tallyspan.stats()
