"""Each verdict in words: the contract term or ledger rule it broke, and how to correct it.

Usage::

    rule = explain("too_short", "12 chars < min_chars 200")
    rule.term    # 'at least 200 characters (min_chars 200)'
    rule.hint    # 'the deliverable must have at least 200 characters (it had 12)'

Both are built from the verdict's type and its content-free detail (the detail names the limit or the
pattern, never the output), and, when the contract is known, from the contract itself (a named pattern
is shown with its regex). So neither ever quotes what the model wrote.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from tallyspan._books._ledger import DEFAULT_LOG_TOOL
from tallyspan._contract._contracts import Contract

__all__ = ["Rule", "explain"]

_LANGUAGE_NAMES: Final = {"ja": "Japanese", "en": "English", "zh": "Chinese", "ko": "Korean"}
_LOG: Final = f"the log tool ({DEFAULT_LOG_TOOL})"


@dataclass(frozen=True)
class Rule:
    """A broken rule in words: ``term`` is the rule, ``hint`` the corrective action."""

    term: str
    hint: str


def _numbers(pattern: str, detail: str) -> tuple[str, ...] | None:
    match = re.search(pattern, detail)
    return match.groups() if match else None


def _pattern_of(name: str, contract: Contract | None, forbidden: bool) -> str:
    """The regex behind a pattern's reported name (an unnamed pattern is reported as itself)."""
    if contract is not None:
        for item in contract.forbidden if forbidden else contract.required:
            if not isinstance(item, str) and item.name == name:
                return item.pattern
    return name


_INLINE_FLAGS: Final = re.compile(r"^\(\?[a-zA-Z]+\)")
_REGEX_SYNTAX: Final = re.compile(r"[\\^$.|?*+()\[\]{}]")


def _matching(pattern: str) -> str:
    # '^...' matches at a line start (contracts are multi-line): say "a line matching ...".
    bare = _INLINE_FLAGS.sub("", pattern)
    return f"a line matching {bare[1:]}" if bare.startswith("^") else f"text matching {bare}"


def _described(name: str, pattern: str) -> str:
    """What a required or forbidden pattern asks for, in words."""
    if pattern != name:
        return f"{name}: {_matching(pattern)}"
    if _REGEX_SYNTAX.search(name):
        return _matching(name)
    # A name without the contract that defines it: say so rather than pass it off as the regex.
    return f"the pattern named {name}"


def _pattern_name(detail: str) -> str | None:
    found = _numbers(r"pattern '(.*)' (?:not found|found|timed out)", detail)
    return found[0] if found else None


def _length(limit: str, sign: str, words: str) -> Callable[[str, Contract | None], Rule]:
    """The rule of ``min_chars`` (``sign`` <) or ``max_chars`` (>), from a detail like "12 chars < min_chars 200"."""

    def rule(detail: str, contract: Contract | None) -> Rule:
        found = _numbers(rf"(\d+) chars {sign} {limit} (\d+)", detail)
        if found is None:
            return Rule(
                f"a {words.split()[1]} length ({limit})", f"the deliverable has the wrong length ({limit})"
            )
        have, bound = found
        return Rule(
            f"{words} {bound} characters ({limit} {bound})",
            f"the deliverable must have {words} {bound} characters (it had {have})",
        )

    return rule


def _missing_required(detail: str, contract: Contract | None) -> Rule:
    name = _pattern_name(detail)
    if name is None:  # a JSON schema problem: the detail names the path and the rule, not the value
        return Rule(
            f"JSON valid against the contract's schema ({detail})",
            f"the deliverable must be JSON valid against the contract's schema: {detail}",
        )
    shown = _described(name, _pattern_of(name, contract, forbidden=False))
    if "timed out" in detail:
        return Rule(
            f"required: {shown}", f"the required {shown} could not be verified in time: simplify the pattern"
        )
    return Rule(f"required: {shown}", f"the deliverable must contain {shown}")


def _forbidden_present(detail: str, contract: Contract | None) -> Rule:
    name = _pattern_name(detail)
    shown = _described(name, _pattern_of(name, contract, forbidden=True)) if name else "a forbidden pattern"
    if "timed out" in detail:
        return Rule(
            f"forbidden: {shown}",
            f"the forbidden {shown} could not be verified in time: simplify the pattern",
        )
    return Rule(f"forbidden: {shown}", f"the deliverable must not contain {shown}")


def _language(required: str) -> str:
    return _LANGUAGE_NAMES.get(required, required)


def _wrong_language(detail: str, contract: Contract | None) -> Rule:
    found = _numbers(r"not (\w+) \(", detail)
    required = found[0] if found else (contract.language if contract and contract.language else None)
    if required is None:
        return Rule("the required language (language)", "write the deliverable in the required language")
    return Rule(
        f"written in {_language(required)} (language: {required})",
        f"write the deliverable in {_language(required)}",
    )


def _unearned_claim(detail: str, contract: Contract | None) -> Rule:
    found = _numbers(r"\d+ (.+?) claim\(s\)", detail)
    kind = f"{found[0]} " if found else ""
    allowed = ", ".join(contract.claims.allowed) if contract and contract.claims else ""
    suffix = f" ({allowed})" if allowed else ""
    return Rule(
        "only the claims in claims.allowed",
        f"remove the {kind}claims the organisation has not earned; only claims.allowed may be made{suffix}",
    )


def _timeout(detail: str, contract: Contract | None) -> Rule:
    found = _numbers(r"took ([\d.e+-]+) s > deadline_s ([\d.e+-]+)", detail)
    if found is not None:
        took, deadline = found
        return Rule(
            f"finish within {deadline} s (deadline_s {deadline})",
            f"the call must finish within {deadline} s (it took {took} s): shorten the work or raise deadline_s",
        )
    return Rule(
        "the model call completes without timing out",
        "the model call timed out: give the inference server more time or capacity, or retry",
    )


def _process_error(detail: str, contract: Contract | None) -> Rule:
    found = _numbers(r"\((.+)\)$", detail)
    what = f" ({found[0]})" if found else ""
    return Rule(
        "the inference server answers",
        f"the inference server failed{what}: check that it is up and has capacity, then retry",
    )


def _starvation(detail: str, contract: Contract | None) -> Rule:
    found = _numbers(r"waited ([\d.e+-]+) s > max_wait_s ([\d.e+-]+)", detail)
    if found is None:
        return Rule("start soon after being queued (max_wait_s)", "start queued work sooner: add capacity")
    waited, most = found
    return Rule(
        f"start within {most} s of being queued (max_wait_s {most})",
        f"the work waited {waited} s in the queue: add capacity or lower concurrency so it starts within {most} s",
    )


def _fixed(term: str, hint: str) -> Callable[[str, Contract | None], Rule]:
    return lambda detail, contract: Rule(term, hint)


_EXPLAIN: Final[dict[str, Callable[[str, Contract | None], Rule]]] = {
    "too_short": _length("min_chars", "<", "at least"),
    "too_long": _length("max_chars", ">", "at most"),
    "missing_required": _missing_required,
    "forbidden_present": _forbidden_present,
    "refusal": _fixed(
        "no refusal (allow_refusal: false)", "do the task instead of refusing: this stage allows no refusal"
    ),
    "reasoning_leaked": _fixed(
        "no reasoning in the deliverable (allow_reasoning: false)",
        "keep the reasoning out of the deliverable (strip thinking blocks and notes to self)",
    ),
    "unearned_claim": _unearned_claim,
    "answer_to_other_question": _fixed(
        "the answer to its own question",
        "answer this task's own question: the deliverable answers another task in flight",
    ),
    "off_topic": _fixed("an answer on the question asked", "answer the question that was asked"),
    "degenerate_repetition": _fixed(
        "no looping repetition",
        "the output loops: lower the temperature or add a repetition penalty, then retry",
    ),
    "not_japanese": _fixed("written in Japanese (language: ja)", "write the deliverable in Japanese"),
    "wrong_language": _wrong_language,
    "chinese_in_japanese": _fixed(
        "Japanese without Chinese clauses (language: ja)", "rewrite the Chinese clauses in Japanese"
    ),
    "broken_language_mix": _fixed(
        "one language throughout (language)",
        "write in one language: no sentences of another language inside the text",
    ),
    "timeout": _timeout,
    "process_error": _process_error,
    "scheduler_starvation": _starvation,
    "unlogged_call": _fixed(
        f"every tool call logged once through {_LOG}", f"log the call through {_LOG} right after making it"
    ),
    "unlogged_failure": _fixed(
        f"failed calls logged too, through {_LOG}",
        f"log the failed call through {_LOG} with claimed_outcome failed",
    ),
    "unlogged_refusal": _fixed(
        f"rejected calls logged too, through {_LOG}",
        f"log the rejected call through {_LOG} with claimed_outcome rejected",
    ),
    "phantom_log": _fixed(
        "log only calls that were made", "remove the log entry: it claims a call that was never made"
    ),
    "mismatched_result": _fixed(
        "log the tool and the outcome the call really had",
        "log the tool and outcome the call really had",
    ),
    "duplicate_log": _fixed("each call logged once", "log each call once: this call was logged again"),
    "ledger_missing": _fixed(
        f"an action log kept through {_LOG}", f"keep the log: call {_LOG} after every tool call"
    ),
    "out_of_order_log": _fixed(
        "each call logged right after it, before the next call",
        "log each call right after it returns, before making the next call",
    ),
    "self_logged": _fixed("the log tool never logged itself", f"never log calls of {_LOG} itself"),
    "malformed_log": _fixed(
        "log entries with a tool_name and a claimed_outcome",
        f"give {_LOG} a tool_name and a claimed_outcome of succeeded, failed or rejected",
    ),
}

_LEDGER_WITH_DETAIL: Final = frozenset({"mismatched_result", "malformed_log"})


def explain(violation_type: str, detail: str | None, contract: Contract | None = None) -> Rule:
    """The rule a verdict broke, in words, and the corrective action.

    Args:
        violation_type: a violation or ledger discrepancy type (an unknown one gets a generic rule).
        detail: the verdict's content-free detail.
        contract: the contract the span was checked against, when known.
    """
    text = detail or ""
    build = _EXPLAIN.get(violation_type)
    if build is None:
        return Rule(violation_type.replace("_", " "), f"fix the {violation_type.replace('_', ' ')} ({text})")
    rule = build(text, contract)
    if violation_type in _LEDGER_WITH_DETAIL and text:
        return Rule(rule.term, f"{rule.hint} ({text})")
    return rule
