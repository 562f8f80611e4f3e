"""Exported datasets hold no content with capture off (issue 38, item 8): secrets planted in every place
an app's content reaches (system and user prompts, the model's answers and tool-call arguments, tool
arguments, results and exception messages, a rejection's reason, the agent's own log and the tool names
and call ids it claims, the API key) appear in neither export format nor its dataset card, nor in the
store but for the claimed identifiers it keeps on the user's own disk (issue 39, item 5). Tried as an
adversary would: nothing leaked; this keeps it so."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import openai
from click.testing import CliRunner

import tallyspan
from tallyspan.cli import main
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply, ScriptedToolCall

CANARIES = {
    place: f"CANARY-{place}-7Q"
    for place in (
        "system", "prompt", "reply", "tool_call_arguments", "tool_arguments", "tool_result", "exception",
        "rejection", "summary", "claimed_tool", "claimed_call_id", "api_key",
    )
}  # fmt: skip
CARD_NUMBER = "4111111111111111"
CONTRACTS = {"contracts": {"report": {"min_chars": 200, "forbidden": ["forbidden-word"], "language": "ja"}}}


def _run_the_app(db_path: Path) -> None:
    replies = [
        ScriptedReply(text=f"I cannot help with that. {CANARIES['reply']} forbidden-word"),
        ScriptedReply(
            tool_calls=[
                ScriptedToolCall(name="search", arguments=json.dumps({"q": CANARIES["tool_call_arguments"]}))
            ]
        ),
    ]
    with OpenAICompatibleServer(
        replies=replies, default_reply=ScriptedReply(text=CANARIES["reply"])
    ) as server:
        instrumentation = tallyspan.instrument(
            contracts=CONTRACTS, store=db_path, instrumentors=["tallyspan_openai"], capture_content=False
        )
        client = openai.OpenAI(base_url=server.base_url, api_key=CANARIES["api_key"], max_retries=0)

        @tallyspan.tool
        def search(q: str, tool_call_id: str) -> str:
            return CANARIES["tool_result"] + q

        @tallyspan.tool
        def book(q: str, tool_call_id: str) -> str:
            raise ValueError(f"{CANARIES['exception']} card {CARD_NUMBER}")

        @tallyspan.tool
        def pay(q: str, tool_call_id: str) -> str:
            raise tallyspan.Rejected(CANARIES["rejection"])

        messages = [
            {"role": "system", "content": CANARIES["system"]},
            {"role": "user", "content": CANARIES["prompt"]},
        ]
        with tallyspan.run("agent"), tallyspan.stage("report"):
            for _ in range(3):
                client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
            search(CANARIES["tool_arguments"], tool_call_id="c1")
            for tool in (book, pay):
                with contextlib.suppress(ValueError, tallyspan.Rejected):
                    tool(CANARIES["tool_arguments"], tool_call_id=f"c-{tool.__name__}")
            tallyspan.ledger.claim("c1", "search", "succeeded", CANARIES["summary"])
            tallyspan.ledger.claim(CANARIES["claimed_call_id"], CANARIES["claimed_tool"], "succeeded", "x")
        assert instrumentation.force_flush(10_000)
    tallyspan.uninstrument()


def _leaks(data: bytes) -> list[str]:
    found = [place for place, canary in CANARIES.items() if canary.encode() in data]
    return found + (["card number"] if CARD_NUMBER.encode() in data else [])


def test_exported_datasets_and_the_store_hold_no_planted_secret_with_capture_off(
    db_path: Path, tmp_path: Path
) -> None:
    _run_the_app(db_path)
    outputs = {"failure-logs": tmp_path / "failures" / "f.jsonl", "diagnosis": tmp_path / "runs" / "d.jsonl"}
    for kind, out in outputs.items():
        result = CliRunner().invoke(
            main, ["--db", str(db_path), "export", "--format", kind, str(out), "--no-progress"]
        )
        assert result.exit_code == 0, result.output
        assert _leaks(result.output.encode()) == []
    records = {kind: out.read_text(encoding="utf-8").splitlines() for kind, out in outputs.items()}
    # The failures are there (so the search is not of an empty file): the refusal, the ledger's books.
    assert len(records["failure-logs"]) >= 2
    assert len(records["diagnosis"]) == 1
    assert all(json.loads(line)["content_captured"] is False for line in records["diagnosis"])
    written = [*outputs.values(), tmp_path / "failures" / "README.md"]
    assert {str(path): _leaks(path.read_bytes()) for path in written} == {str(path): [] for path in written}
    # The store is the user's own disk: it keeps the identifiers the agent claimed (SECURITY.md), and
    # nothing else; the export above, made to leave the machine, gives them as "unobserved".
    store_files = [path for path in db_path.parent.iterdir() if path.name.startswith(db_path.name)]
    assert sorted({leak for path in store_files for leak in _leaks(path.read_bytes())}) == [
        "claimed_call_id",
        "claimed_tool",
    ]
    assert (
        "unobserved claimed succeeded, never called" in records["failure-logs"][-1] + records["diagnosis"][0]
    )
