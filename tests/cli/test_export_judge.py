"""``tallyspan export --format diagnosis --judge URL --judge-model NAME`` against a local scripted server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from tests.cli.conftest import Filled

from tallyspan._datasets._judge import JUDGE_PROMPT
from tallyspan.cli import main
from tallyspan.testing import OpenAICompatibleServer, RecordedRequest, ScriptedReply


def _export(filled: Filled, out: Path, *options: str) -> list[dict[str, Any]]:
    result = CliRunner().invoke(
        main,
        ["--db", str(filled.path), "export", "--format", "diagnosis", *options, str(out)],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def test_the_judged_diagnosis_is_kept_beside_the_rule_based_one(filled: Filled, tmp_path: Path) -> None:
    answer = {
        "step": 0,
        "agent": "reporter",
        "explanation": "the report is too short",
        "correction": "write more",
    }
    with OpenAICompatibleServer(
        replies=[ScriptedReply(text=f"Here you go:\n{json.dumps(answer)}")]
    ) as server:
        records = _export(
            filled, tmp_path / "runs.jsonl", "--judge", server.base_url, "--judge-model", "judge-1"
        )
        requests = list(server.requests)
    reporter = next(r for r in records if r["run"]["name"] == "reporter")
    assert reporter["judged"] == {**answer, "model": "judge-1", "error": None}
    assert reporter["diagnosis"]["step"] == 0  # the rule-based one is still there
    assert reporter["diagnosis"]["agent"] == "reporter"
    sent = [r for r in requests if r.route.endswith("/chat/completions")]
    assert len(sent) == len(records)
    body = sent[0].body
    assert body["model"] == "judge-1"
    assert body["messages"][0] == {"role": "system", "content": JUDGE_PROMPT}
    steps = json.loads(body["messages"][1]["content"])["steps"]
    assert [step["index"] for step in steps] == list(range(len(reporter["steps"])))
    assert "diagnosis" not in body["messages"][1]["content"]  # the judge is not told the rule-based answer


def test_an_answer_that_does_not_parse_is_recorded_as_an_error(filled: Filled, tmp_path: Path) -> None:
    def reply(request: RecordedRequest) -> ScriptedReply:
        return ScriptedReply(text="I think the second step is wrong.")

    with OpenAICompatibleServer(handler=reply) as server:
        records = _export(filled, tmp_path / "runs.jsonl", "--judge", server.base_url, "--judge-model", "m")
    judged = records[0]["judged"]
    assert judged["model"] == "m"
    assert judged["step"] is None
    assert judged["error"].startswith("ValueError: the answer holds no JSON object")


def test_an_unreachable_judge_does_not_stop_the_export(filled: Filled, tmp_path: Path) -> None:
    with OpenAICompatibleServer() as server:
        url = server.base_url
    out = tmp_path / "runs.jsonl"
    result = CliRunner().invoke(
        main,
        ["--db", str(filled.path), "export", "--format", "diagnosis", "--judge", url, "--judge-model", "m",
         "--json", str(out)],
        catch_exceptions=False,
    )  # fmt: skip
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(records) == 2
    assert all(r["judged"]["error"].startswith("APIConnectionError") for r in records)
    assert json.loads(result.output)["data"]["judged"] == 2


def test_without_judge_nothing_is_sent_and_judged_is_null(filled: Filled, tmp_path: Path) -> None:
    records = _export(filled, tmp_path / "runs.jsonl")
    assert records
    assert all(record["judged"] is None for record in records)


def test_judge_options_go_together(filled: Filled, tmp_path: Path) -> None:
    for options in (["--judge", "http://127.0.0.1:9/v1"], ["--judge-model", "m"]):
        result = CliRunner().invoke(
            main, ["--db", str(filled.path), "export", "--format", "diagnosis", *options, str(tmp_path / "o")]
        )
        assert result.exit_code == 2
        assert "--judge and --judge-model go together" in result.output
    result = CliRunner().invoke(
        main,
        ["--db", str(filled.path), "export", "--format", "failure-logs", "--judge", "http://127.0.0.1:9/v1",
         "--judge-model", "m", str(tmp_path / "o")],
    )  # fmt: skip
    assert result.exit_code == 2
