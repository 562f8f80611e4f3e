"""The check engine: one model output against one contract, as a pure function.

Usage::

    import tallyspan
    contract = tallyspan.Contract(language="ja", min_chars=200, required=[r"^判定[:：]"])
    result = tallyspan.check(text, contract)
    if not result.ok:
        print(result.violation_types)        # ('missing_required', 'too_short')

The CLI (``tallyspan check``), tests and the checks span processor all call :func:`check`. Details are
content-free ("12 chars < min_chars 200", "pattern 'verdict' not found"): they never quote the output.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from tallyspan._contract._contracts import Contract
from tallyspan._contract._patterns import PatternBudget
from tallyspan._engine._jsonschema import parse_json_output, schema_problems
from tallyspan._engine._language import (
    english_requested,
    language_violations,
    requested_languages,
    reworked_material,
)
from tallyspan._engine._refusal import find_claims, find_reasoning_leak, is_refusal, strip_reasoning
from tallyspan._engine._relevance import off_topic_detail, other_question_detail
from tallyspan._engine._repetition import repeated_share
from tallyspan._engine._scripts import without_whitespace
from tallyspan._engine._taxonomy import FAILURE_CLASS_OF, FailureClass, ViolationType, most_severe
from tallyspan._selfstats import swallowed

__all__ = ["RULES", "CheckResult", "Violation", "check"]

_logger = logging.getLogger(__name__)

_NO_CONTRACT = Contract()

_TIMEOUT_ERROR = re.compile(r"(?i)time(?:d)?[ _-]?out|deadline[ _]exceeded|\b408\b|\b504\b")
_PROCESS_ERROR = re.compile(
    r"(?i)connect(?:ion)?[ _]?(?:error|refused|reset|aborted)|connecterror|remoteprotocolerror|"
    r"server ?disconnected|internal ?server ?error|service ?unavailable|bad ?gateway|broken ?pipe|"
    r"apiconnectionerror|econnrefused|econnreset|\b5\d\d\b"
)


@dataclass(frozen=True)
class Violation:
    """One broken rule: its type, its failure class and a detail that never quotes the output."""

    type: ViolationType
    failure_class: FailureClass
    detail: str

    def to_dict(self) -> dict[str, str]:
        """The JSON form used by ``tallyspan check``."""
        return {"type": self.type.value, "failure_class": self.failure_class.value, "detail": self.detail}


@dataclass(frozen=True)
class CheckResult:
    """The outcome of :func:`check`."""

    violations: tuple[Violation, ...] = ()
    check_errors: tuple[str, ...] = ()
    """Sorted, unique names of the checks that could not give a verdict: a rule that raised (see
    :data:`RULES`), or ``pattern_budget`` when the contract's patterns ran out of time on the output."""

    @property
    def violation_types(self) -> tuple[str, ...]:
        """Sorted, unique violation type names."""
        return tuple(sorted({violation.type.value for violation in self.violations}))

    @property
    def failure_class(self) -> str | None:
        """The most severe failure class among the violations, or None when clean."""
        worst = most_severe(violation.failure_class for violation in self.violations)
        return worst.value if worst is not None else None

    @property
    def ok(self) -> bool:
        """True when there is no violation."""
        return not self.violations

    def to_dict(self) -> dict[str, object]:
        """The JSON form used by ``tallyspan check``: ok, violation_types, failure_class, violations,
        check_errors."""
        return {
            "ok": self.ok,
            "violation_types": list(self.violation_types),
            "failure_class": self.failure_class,
            "violations": [violation.to_dict() for violation in self.violations],
            "check_errors": list(self.check_errors),
        }


def _violation(violation_type: ViolationType, detail: str) -> Violation:
    return Violation(violation_type, FAILURE_CLASS_OF[violation_type], detail)


def _error_violation(error: str | BaseException) -> Violation | None:
    if isinstance(error, str):
        description = error
    else:
        description = " ".join(f"{type(cause).__name__}: {cause}" for cause in _causes(error))
    name = description.split(":", 1)[0].strip()[:60] or "error"
    if _TIMEOUT_ERROR.search(description) or isinstance(error, TimeoutError):
        return _violation(ViolationType.TIMEOUT, f"the call failed with a timeout ({name})")
    if _PROCESS_ERROR.search(description) or isinstance(error, ConnectionError):
        return _violation(ViolationType.PROCESS_ERROR, f"the inference server failed ({name})")
    return None


def _causes(error: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and len(chain) < 5:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def check(
    output: str | None,
    contract: Contract | None = None,
    *,
    prompt: str | None = None,
    other_prompts: Sequence[str] = (),
    other_answers: Sequence[tuple[str, str]] = (),
    reasoning_text: str = "",
    elapsed_s: float | None = None,
    error: str | BaseException | None = None,
    waited_s: float | None = None,
) -> CheckResult:
    """Check one model output against a contract.

    Args:
        output: the answer text (the first choice); None when it is not known (not captured): only
            the non-text checks (timeout, process_error, scheduler_starvation) run then.
        contract: the stage's contract; None applies the defaults (no refusal, no leaked reasoning).
        prompt: the question the output answers (the last user message), for answer_to_other_question.
        other_prompts: prompts of other calls in flight at the same time.
        other_answers: (prompt, output) of other recent calls; the same output for another prompt is
            an answer to the other question.
        reasoning_text: reasoning the provider returned in its own field (not a leak by itself).
        elapsed_s: how long the call took; more than ``contract.deadline_s`` is a ``timeout``.
        error: the call's failure (an exception, or its ``error.type`` / description). Timeouts give
            ``timeout``; refused or reset connections and 5xx answers give ``process_error``. When an
            error is given the output checks are skipped: there is no deliverable to judge.
        waited_s: seconds between ``tallyspan.stage(..., enqueued_at=)`` and the call's start; more than
            ``contract.max_wait_s`` is ``scheduler_starvation``.

    Returns:
        A :class:`CheckResult`; ``ok`` when nothing is violated.
    """
    contract = contract if contract is not None else _NO_CONTRACT
    violations: list[Violation] = []
    if waited_s is not None and contract.max_wait_s is not None and waited_s > contract.max_wait_s:
        violations.append(
            _violation(
                ViolationType.SCHEDULER_STARVATION,
                f"waited {waited_s:.3g} s > max_wait_s {contract.max_wait_s:g}",
            )
        )
    if elapsed_s is not None and contract.deadline_s is not None and elapsed_s > contract.deadline_s:
        violations.append(
            _violation(ViolationType.TIMEOUT, f"took {elapsed_s:.3g} s > deadline_s {contract.deadline_s:g}")
        )
    if error is not None:
        found = _error_violation(error)
        if found is not None and found.type not in {violation.type for violation in violations}:
            violations.append(found)
        return CheckResult(tuple(violations))
    if output is None:
        return CheckResult(tuple(violations))
    budget = PatternBudget()  # one time budget for all of the contract's patterns on this output
    judged, errors = _output_violations(
        output, contract, prompt, other_prompts, other_answers, reasoning_text, budget
    )
    violations.extend(judged)
    return CheckResult(tuple(violations), tuple(sorted({*errors, *budget.check_errors})))


class _Output(NamedTuple):
    """What the output rules look at (a named tuple: made for every checked output, it costs a third of a
    frozen dataclass)."""

    output: str
    answer: str
    """The output without reasoning blocks and harmony analysis."""
    compact: str
    """The answer without whitespace: the length rule counts it, the refusal rules measure it."""
    contract: Contract
    prompt: str | None
    other_prompts: Sequence[str]
    other_answers: Sequence[tuple[str, str]]
    reasoning_text: str
    budget: PatternBudget
    """The time all of the contract's patterns may take on this output together."""


# Whitespace between two Latin-script characters is a word's gap and counts as one character ("I am fine."
# is ten); elsewhere (Japanese, line breaks around CJK text, indentation) it is layout and counts nothing.
_LATIN_GAP = re.compile(r"(?<=[!-~\u00C0-\u024F])\s+(?=[!-~\u00C0-\u024F])")


def _length(given: _Output) -> Iterator[Violation]:
    contract = given.contract
    if contract.min_chars is None and contract.max_chars is None:
        return
    length = len(given.compact)
    spaces = len(given.answer) - length  # whitespace characters: the most the gaps below can add
    if spaces and (
        (contract.min_chars is not None and length < contract.min_chars)
        or (contract.max_chars is not None and length <= contract.max_chars < length + spaces)
    ):
        # Counted only where it can change the verdict: a scan of the whole answer for a long one.
        length += len(_LATIN_GAP.findall(given.answer))
    if contract.min_chars is not None and length < contract.min_chars:
        yield _violation(ViolationType.TOO_SHORT, f"{length} chars < min_chars {contract.min_chars}")
    if contract.max_chars is not None and length > contract.max_chars:
        yield _violation(ViolationType.TOO_LONG, f"{length} chars > max_chars {contract.max_chars}")


def _required(given: _Output) -> Iterator[Violation]:
    for name, pattern in given.contract.required_patterns:
        found = given.budget.search(pattern, given.answer)
        if found is None:
            yield _violation(ViolationType.MISSING_REQUIRED, f"pattern '{name}' timed out; not verified")
        elif not found:
            yield _violation(ViolationType.MISSING_REQUIRED, f"pattern '{name}' not found")


def _json_schema(given: _Output) -> Iterator[Violation]:
    validator = given.contract.schema_validator
    if validator is None:
        return
    parsed, value = parse_json_output(given.answer)  # JsonTooDeepError: recorded as a check error
    if not parsed:
        yield _violation(ViolationType.MISSING_REQUIRED, "output is not JSON")
        return
    for problem in schema_problems(value, validator):
        yield _violation(ViolationType.MISSING_REQUIRED, problem)


def _forbidden(given: _Output) -> Iterator[Violation]:
    for name, pattern in given.contract.forbidden_patterns:
        found = given.budget.search(pattern, given.output)
        if found is None:
            yield _violation(ViolationType.FORBIDDEN_PRESENT, f"pattern '{name}' timed out; not verified")
        elif found:
            yield _violation(ViolationType.FORBIDDEN_PRESENT, f"pattern '{name}' found")


def _refusal(given: _Output) -> Iterator[Violation]:
    if not given.contract.allow_refusal and is_refusal(given.answer, given.compact):
        yield _violation(ViolationType.REFUSAL, "the output is a refusal")


def _reasoning(given: _Output) -> Iterator[Violation]:
    if not given.contract.allow_reasoning:
        leak = find_reasoning_leak(given.output, given.reasoning_text)
        if leak is not None:
            yield _violation(ViolationType.REASONING_LEAKED, leak)


def _claims(given: _Output) -> Iterator[Violation]:
    if given.contract.claims is None:
        return
    kinds = find_claims(given.answer, given.contract.claims.allowed)
    for kind in sorted(set(kinds)):
        yield _violation(
            ViolationType.UNEARNED_CLAIM, f"{kinds.count(kind)} {kind} claim(s) not in claims.allowed"
        )


def _relevance(given: _Output) -> Iterator[Violation]:
    other = other_question_detail(given.answer, given.prompt, given.other_prompts, given.other_answers)
    if other is not None:
        # A refusal belongs to no question: the same "I can't help" given to many prompts is a refusal
        # each time, not another task's answer.
        if not is_refusal(given.answer, given.compact):
            yield _violation(ViolationType.ANSWER_TO_OTHER_QUESTION, other)
        return
    if not given.contract.allow_off_topic:
        off = off_topic_detail(given.answer, given.prompt, given.other_prompts)
        # A refusal says no; it is not off topic.
        if off is not None and not is_refusal(given.answer, given.compact):
            yield _violation(ViolationType.OFF_TOPIC, off)


def _repetition(given: _Output) -> Iterator[Violation]:
    threshold = given.contract.max_repeated_share
    if threshold is None:
        return
    share, unit = repeated_share(given.answer)
    if share > threshold:
        yield _violation(
            ViolationType.DEGENERATE_REPETITION,
            f"{share:.0%} of the output is one {unit}-char unit repeated back to back > "
            f"max_repeated_share {threshold:g}",
        )


def _language(given: _Output, off_topic: bool = False) -> Iterator[Violation]:
    if given.contract.language is None:
        return
    wanted = english_requested(given.prompt)
    requested = requested_languages(given.prompt)
    violations = language_violations(
        given.answer,
        given.contract.language,
        english_wanted=wanted,
        requested=requested,
        code_asked_for=not off_topic,
    )
    if violations and violations[0][0] in (ViolationType.NOT_JAPANESE, ViolationType.WRONG_LANGUAGE):
        # Not the contract's language: perhaps that of the text the prompt gave to rework (only then paid for).
        material = reworked_material(given.answer, given.prompt) - requested
        if material:
            violations = language_violations(
                given.answer,
                given.contract.language,
                english_wanted=True,
                requested=requested | material,
                code_asked_for=not off_topic,
            )
    for violation_type, detail in violations:
        yield _violation(violation_type, detail)


#: The relevance verdicts that say the answer is not what its question asked for (code included).
_NOT_ASKED_FOR = frozenset({ViolationType.OFF_TOPIC, ViolationType.ANSWER_TO_OTHER_QUESTION})


#: The output rules in the order they run, by the name a failure is recorded under
#: (``CheckResult.check_errors``, the span's ``tallyspan.check_errors``, ``stats()["errors.check_rule.<name>"]``).
RULES: tuple[tuple[str, Callable[[_Output], Iterable[Violation]]], ...] = (
    ("length", _length),
    ("required", _required),
    ("json_schema", _json_schema),
    ("forbidden", _forbidden),
    ("refusal", _refusal),
    ("reasoning", _reasoning),
    ("claims", _claims),
    ("relevance", _relevance),
    ("repetition", _repetition),
    ("language", _language),
)


def _output_violations(
    output: str,
    contract: Contract,
    prompt: str | None,
    other_prompts: Sequence[str],
    other_answers: Sequence[tuple[str, str]],
    reasoning_text: str,
    budget: PatternBudget,
) -> tuple[list[Violation], list[str]]:
    errors: list[str] = []
    try:
        answer = strip_reasoning(output)
    except Exception:  # the stripping is a rule too: on failure the others judge the raw output
        swallowed(_logger, "check_rule.strip_reasoning", "stripping reasoning from an output failed")
        errors.append("strip_reasoning")
        answer = output
    # The answer without whitespace, once, for the rules that measure it: made here, since every default
    # contract runs the refusal rule.
    compact = without_whitespace(answer)
    given = _Output(
        output, answer, compact, contract, prompt, other_prompts, other_answers, reasoning_text, budget
    )
    violations: list[Violation] = []
    for name, rule in RULES:
        try:
            if rule is _language:
                # Only code the question asked for has no language: an off-topic dump of code is text.
                off_topic = any(violation.type in _NOT_ASKED_FOR for violation in violations)
                violations.extend(_language(given, off_topic))
            else:
                violations.extend(rule(given))
        except Exception:  # one rule's failure (a bug, a hostile output) must not cost the other verdicts
            swallowed(_logger, f"check_rule.{name}", f"the check rule {name!r} failed")
            errors.append(name)
    return violations, errors
