"""The judged diagnosis: a failed run's steps sent to an OpenAI-compatible model the user named.

Usage::

    judge = Judge("http://127.0.0.1:8000/v1", "qwen3-32b")
    record["judged"] = judge.judge(record)     # {"model", "step", "agent", "explanation", "correction", "error"}

Off unless ``tallyspan export --judge URL --judge-model NAME`` asks for it; the prompt goes to that URL
and nowhere else (the client gets the URL explicitly, so ``OPENAI_BASE_URL`` cannot redirect it). The
model sees the steps as the record has them (names, agents, timings, statuses, violation types, and
content only where it was captured), not the rule-based diagnosis, so the two stay independent. Its
answer is parsed as JSON; an answer that does not parse is kept as an error, never raised. The API key
is ``TALLYSPAN_JUDGE_API_KEY`` (local servers usually need none).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any, Final

from opentelemetry.instrumentation.utils import suppress_instrumentation

from tallyspan._errors import ConfigError

__all__ = ["ENV_JUDGE_API_KEY", "JUDGE_PROMPT", "Judge", "judge_messages"]

ENV_JUDGE_API_KEY: Final = "TALLYSPAN_JUDGE_API_KEY"
INSTALL_HINT: Final = "--judge needs the openai package: pip install 'tallyspan[judge]'"

JUDGE_PROMPT: Final = """\
You diagnose failed runs of an LLM agent. You get the run's steps in order as JSON: each step is a \
model call or a tool call with its index, name, agent, timing, status, error type, the violation types \
an automatic checker found on it, and its content when it was recorded.

Find the first step where the run went wrong: the earliest mistake that made the run fail, not a \
later symptom. Name the agent responsible for it, explain what went wrong in one or two sentences, \
and say what the agent should have done instead.

Answer with one JSON object and nothing else:
{"step": <index of the failing step, or null>, "agent": "<agent name, or null>", \
"explanation": "<what went wrong>", "correction": "<what to do instead>"}"""
"""The system prompt of the judged diagnosis (documented in docs/datasets.md)."""

_STEP_FIELDS: Final = (
    "index",
    "kind",
    "name",
    "agent",
    "model",
    "tool",
    "stage",
    "duration_ms",
    "status",
    "error_type",
    "outcome",
    "violation_types",
    "content",
)
_OBJECT: Final = re.compile(r"\{.*\}", re.DOTALL)


def judge_messages(record: Mapping[str, Any]) -> list[dict[str, str]]:
    """The chat messages sent for one diagnosis record: the prompt, then the run and its steps."""
    steps = [
        {key: step.get(key) for key in _STEP_FIELDS if step.get(key) is not None} for step in record["steps"]
    ]
    run = {"run": record["run"].get("name"), "steps": steps}
    return [
        {"role": "system", "content": JUDGE_PROMPT},
        {"role": "user", "content": json.dumps(run, ensure_ascii=False)},
    ]


def _answer(text: str) -> dict[str, Any]:
    match = _OBJECT.search(text)
    if match is None:
        raise ValueError("the answer holds no JSON object")
    answer = json.loads(match.group(0))
    if not isinstance(answer, dict):
        raise ValueError("the answer is not a JSON object")
    step = answer.get("step")
    if isinstance(step, str) and step.strip().isdigit():
        step = int(step)
    if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
        raise ValueError("step is not an index")
    return {
        "step": step,
        "agent": None if answer.get("agent") is None else str(answer["agent"]),
        "explanation": str(answer.get("explanation") or ""),
        "correction": str(answer.get("correction") or ""),
    }


class Judge:
    """Asks an OpenAI-compatible endpoint for a diagnosis of each failed run.

    Args:
        url: the endpoint's base URL (e.g. ``http://127.0.0.1:8000/v1``).
        model: the model name to ask.
        timeout_s: per request.

    Raises:
        ConfigError: the ``openai`` package is not installed, or the URL is not http(s).
    """

    def __init__(self, url: str, model: str, *, timeout_s: float = 120.0) -> None:
        if not re.match(r"^https?://", url):
            raise ConfigError(f"--judge must be an http(s) URL, not {url!r}")
        try:
            import openai
        except ImportError as exc:
            raise ConfigError(INSTALL_HINT) from exc
        self.model = model
        self._client = openai.OpenAI(
            base_url=url,
            api_key=os.environ.get(ENV_JUDGE_API_KEY) or "unused",
            timeout=timeout_s,
            max_retries=1,
        )

    def judge(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """The judge's diagnosis of one record; a failed request or answer gives ``error``, never raises."""
        result: dict[str, Any] = {"model": self.model, "step": None, "agent": None}
        result.update(explanation=None, correction=None)
        try:
            # Our own request is not the app's: keep it out of any tracing active in this process.
            messages: Any = judge_messages(record)  # plain dicts: the client's TypedDicts at run time
            with suppress_instrumentation():
                response = self._client.chat.completions.create(
                    model=self.model, messages=messages, temperature=0
                )
            text = response.choices[0].message.content or "" if response.choices else ""
            result.update(_answer(text))
            result["error"] = None
        except Exception as exc:  # one run's failed judgment must not stop the export: it is recorded
            result["error"] = f"{type(exc).__name__}: {exc}"[:500]
        return result

    def close(self) -> None:
        """Release the client's connections."""
        self._client.close()
