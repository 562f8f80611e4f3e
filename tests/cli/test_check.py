"""``tallyspan check``: the verdict as text (or the JSON document with ``--json``) on stdout, exit 0 clean
/ 1 violations / 2 bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tallyspan.cli import main

CONTRACTS = """\
contracts:
  weekly_report:
    language: ja
    min_chars: 10
    required: ['^判定[:：]\\s*(合格|不合格)']
  triage:
    allow_refusal: true
"""
GOOD = "判定：合格\n今週の問い合わせ対応は予定通り完了しました。"


@pytest.fixture
def contracts(tmp_path: Path) -> Path:
    path = tmp_path / "contracts.yaml"
    path.write_text(CONTRACTS, encoding="utf-8")
    return path


def _run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["check", *args], input=stdin, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_a_clean_output_from_stdin_exits_0_with_the_json_result(contracts: Path) -> None:
    code, out, _ = _run("--contracts", str(contracts), "--stage", "weekly_report", "--json", "-", stdin=GOOD)
    assert code == 0
    assert json.loads(out) == {
        "format_version": 1,
        "command": "check",
        "data": {
            "stage": "weekly_report",
            "contract": "weekly_report",
            "ok": True,
            "violation_types": [],
            "failure_class": None,
            "violations": [],
            "check_errors": [],
        },
    }


def test_violations_in_a_file_exit_1_with_types_and_details(contracts: Path, tmp_path: Path) -> None:
    output = tmp_path / "out.txt"
    output.write_text("Sorry, here is a short answer.", encoding="utf-8")
    code, out, _ = _run("--contracts", str(contracts), "--stage", "weekly_report", "--json", str(output))
    assert code == 1
    data = json.loads(out)["data"]
    assert data["ok"] is False
    assert data["violation_types"] == ["missing_required", "not_japanese"]
    assert data["failure_class"] == "contract_violation"
    assert [violation["detail"] for violation in data["violations"]] == [
        "pattern '^判定[:：]\\s*(合格|不合格)' not found",
        "primary language en, not ja (0 kana, 0 han, 6 latin words)",
    ]


def test_stdin_is_the_default_input(contracts: Path) -> None:
    code, out, _ = _run(
        "--contracts", str(contracts), "--stage", "triage", "--json", stdin="I'm sorry, but I can't help."
    )
    assert code == 0
    assert json.loads(out)["data"]["contract"] == "triage"


def test_prompt_files_feed_answer_to_other_question(contracts: Path, tmp_path: Path) -> None:
    own = tmp_path / "own.txt"
    own.write_text("東京の人口動態と経済への影響を説明してください。", encoding="utf-8")
    other = tmp_path / "other.txt"
    other.write_text("光合成の二つの段階と葉緑体の役割を説明してください。", encoding="utf-8")
    answer = "光合成は明反応と暗反応の二つの段階からなります。葉緑体のチラコイド膜で明反応が起こります。"
    code, out, _ = _run(
        "--contracts", str(contracts), "--stage", "triage", "--prompt-file", str(own),
        "--other-prompt-file", str(other), "--json", "-", stdin=answer,
    )  # fmt: skip
    assert code == 1
    assert json.loads(out)["data"]["violation_types"] == ["answer_to_other_question"]


def test_the_default_output_is_the_verdict_as_text(contracts: Path) -> None:
    code, out, _ = _run("--contracts", str(contracts), "--stage", "weekly_report", stdin=GOOD)
    assert (code, out) == (0, "weekly_report (contract weekly_report): ok\n")
    code, out, _ = _run("--contracts", str(contracts), "--stage", "weekly_report", stdin="Sorry, short.")
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "weekly_report (contract weekly_report): 2 violation(s)"
    assert (
        lines[1] == "  missing_required (contract_violation): pattern '^判定[:：]\\s*(合格|不合格)' not found"
    )
    assert lines[2].startswith("  not_japanese (language_corruption): primary language en, not ja")
    assert len(lines) == 3


def test_json_and_text_exit_alike_on_bad_input(contracts: Path) -> None:
    for flags in ((), ("--json",)):
        code, out, err = _run("--contracts", str(contracts), "--stage", "nope", *flags, "-", stdin=GOOD)
        assert (code, out) == (2, "")
        assert "no contract for stage 'nope'" in err


def test_an_unknown_stage_exits_2_naming_the_known_stages(contracts: Path) -> None:
    code, out, err = _run("--contracts", str(contracts), "--stage", "nope", "-", stdin=GOOD)
    assert code == 2
    assert out == ""
    assert "no contract for stage 'nope'" in err
    assert "triage, weekly_report" in err


def test_a_bad_contracts_file_exits_2_with_file_stage_field_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("contracts:\n  report:\n    min_chars: -1\n", encoding="utf-8")
    code, _, err = _run("--contracts", str(bad), "--stage", "report", "-", stdin=GOOD)
    assert code == 2
    assert f"{bad}:3, stage 'report', field 'min_chars'" in err


def test_missing_files_and_non_utf8_input_exit_2(contracts: Path, tmp_path: Path) -> None:
    code, _, err = _run("--contracts", str(tmp_path / "none.yaml"), "--stage", "x", "-", stdin=GOOD)
    assert (code, "cannot read the contracts file" in err) == (2, True)
    code, _, err = _run("--contracts", str(contracts), "--stage", "triage", str(tmp_path / "missing.txt"))
    assert (code, "cannot read the output file" in err) == (2, True)
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"\xff\xfe\x00bad")
    code, _, err = _run("--contracts", str(contracts), "--stage", "triage", str(binary))
    assert (code, "cannot read the output file" in err) == (2, True)


def test_missing_required_options_are_usage_errors() -> None:
    code, _, err = _run("--stage", "x", "-", stdin="")
    assert code == 2
    assert "--contracts" in err


def test_a_misspelt_contracts_section_exits_2_with_the_fix_and_no_traceback(tmp_path: Path) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text("contract:\n  report:\n    min_chars: 10\n", encoding="utf-8")
    code, out, err = _run("--contracts", str(typo), "--stage", "report", "-", stdin=GOOD)
    assert (code, out) == (2, "")
    assert f"{typo}:1, field 'contract': unknown top-level key 'contract'; did you mean 'contracts'?" in err
    assert "Traceback" not in err


def test_a_non_utf8_contracts_file_exits_2_naming_the_encoding(tmp_path: Path) -> None:
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("contracts:\n  report:\n    forbidden: ['café']\n".encode("latin-1"))
    code, _, err = _run("--contracts", str(latin), "--stage", "report", "-", stdin=GOOD)
    assert code == 2
    assert f"{latin}:3: the contracts file is not UTF-8" in err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
@pytest.mark.parametrize(
    ("contracts_text", "says"),
    [
        (None, "is a FIFO, not a regular file; refused unread"),
        ("contracts:\n  report:\n    required: ['(?:(?:(?:a{1000}){1000}){1000})']\n", "counted repetitions"),
        ("contracts:\n  report:\n    json_schema: " + "[" * 3000 + "]" * 3000 + "\n", "nest"),
    ],
    ids=["fifo", "nested-counts", "deep-yaml"],
)
def test_a_hostile_contracts_file_exits_2_fast_in_a_real_process(
    tmp_path: Path, contracts_text: str | None, says: str
) -> None:
    path = tmp_path / "contracts.yaml"
    if contracts_text is None:
        os.mkfifo(path)  # opening it for reading used to wait for a writer for ever
    else:
        path.write_text(contracts_text, encoding="utf-8")
    child = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20)); "
        "from tallyspan.cli import main; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", child, "check", "--contracts", str(path), "--stage", "report", "-"],
        input=GOOD,
        capture_output=True,
        text=True,
        timeout=20,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stdout == ""
    assert str(path) in done.stderr
    assert says in done.stderr
    assert "Traceback" not in done.stderr


def test_patterns_that_spend_the_time_budget_are_named_as_not_checked(tmp_path: Path) -> None:
    # Three catastrophic patterns each stop at their 0.1 s timeout, which spends the span's 0.25 s.
    hostile = tmp_path / "hostile.yaml"
    hostile.write_text(
        "contracts:\n  report:\n    max_repeated_share: null\n"
        "    required: ['^(a+)+$', '^(a|a)+$', '^(a|aa)+$']\n",
        encoding="utf-8",
    )
    code, out, _ = _run("--contracts", str(hostile), "--stage", "report", "-", stdin="a" * 5000 + "!")
    assert code == 1
    assert out.splitlines()[-1] == "  could not check: pattern_budget"


def test_a_contracts_file_with_no_contract_names_none(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("contracts: {}\n", encoding="utf-8")
    code, out, err = _run("--contracts", str(empty), "--stage", "report", "-", stdin=GOOD)
    assert (code, out) == (2, "")
    assert err == f"Error: {empty}: no contract for stage 'report' and no default (stages: none)\n"


@pytest.mark.usefixtures("ascii_locale")
def test_the_output_and_prompt_files_are_read_as_utf8_whatever_the_locale(
    contracts: Path, tmp_path: Path
) -> None:
    output, prompt = tmp_path / "out.txt", tmp_path / "prompt.txt"
    output.write_text(GOOD, encoding="utf-8")
    prompt.write_text("今週の問い合わせ対応を報告してください。", encoding="utf-8")
    code, out, err = _run(
        "--contracts", str(contracts), "--stage", "weekly_report", "--prompt-file", str(prompt), str(output)
    )
    assert (code, out, err) == (0, "weekly_report (contract weekly_report): ok\n", "")


def test_an_output_no_rule_found_fault_with_but_one_rule_could_not_check_is_not_ok(tmp_path: Path) -> None:
    # JSON nested deeper than the checks parse: the json_schema rule cannot run, and nothing else fails.
    contracts = tmp_path / "json.yaml"
    contracts.write_text(
        "contracts:\n  report:\n    max_repeated_share: null\n    json_schema: {type: object}\n",
        encoding="utf-8",
    )
    deep = "".join(f'{{"k{n}":' for n in range(100)) + "1" + "}" * 100
    code, out, _ = _run("--contracts", str(contracts), "--stage", "report", "-", stdin=deep)
    assert (code, out) == (
        3,
        "report (contract report): not fully checked, 1 rule(s) could not run\n  could not check: json_schema\n",
    )
