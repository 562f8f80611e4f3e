"""``tallyspan check``: JSON on stdout, exit 0 clean / 1 violations / 2 bad input."""

from __future__ import annotations

import json
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
    code, out, _ = _run("--contracts", str(contracts), "--stage", "weekly_report", "-", stdin=GOOD)
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
    code, out, _ = _run("--contracts", str(contracts), "--stage", "weekly_report", str(output))
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
        "--contracts", str(contracts), "--stage", "triage", stdin="I'm sorry, but I can't help."
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
        "--other-prompt-file", str(other), "-", stdin=answer,
    )  # fmt: skip
    assert code == 1
    assert json.loads(out)["data"]["violation_types"] == ["answer_to_other_question"]


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
