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

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tallyspan._contracts import Contract
from tallyspan._jsonschema import parse_json_output, schema_problems
from tallyspan._language import language_violations
from tallyspan._patterns import PatternBudget
from tallyspan._refusal import find_claims, find_reasoning_leak, is_refusal, strip_reasoning
from tallyspan._relevance import other_question_detail
from tallyspan._taxonomy import FAILURE_CLASS_OF, FailureClass, ViolationType, most_severe

__all__ = ["CheckResult", "Violation", "check"]

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
    """Checks that could not finish (``pattern_budget``: the span's patterns ran out of time)."""

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
        """The JSON form used by ``tallyspan check``: ok, violation_types, failure_class, violations."""
        return {
            "ok": self.ok,
            "violation_types": list(self.violation_types),
            "failure_class": self.failure_class,
            "violations": [violation.to_dict() for violation in self.violations],
        }


def _violation(violation_type: ViolationType, detail: str) -> Violation:
    return Violation(violation_type, FAILURE_CLASS_OF[violation_type], detail)


def _error_violation(error: str | BaseException) -> Violation | None:
    description = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    if isinstance(error, BaseException):
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
    violations.extend(
        _output_violations(output, contract, prompt, other_prompts, other_answers, reasoning_text, budget)
    )
    return CheckResult(tuple(violations), check_errors=budget.check_errors)


def _output_violations(
    output: str,
    contract: Contract,
    prompt: str | None,
    other_prompts: Sequence[str],
    other_answers: Sequence[tuple[str, str]],
    reasoning_text: str,
    budget: PatternBudget,
) -> list[Violation]:
    violations: list[Violation] = []
    answer = strip_reasoning(output)
    length = len("".join(answer.split()))
    if contract.min_chars is not None and length < contract.min_chars:
        violations.append(
            _violation(ViolationType.TOO_SHORT, f"{length} chars < min_chars {contract.min_chars}")
        )
    if contract.max_chars is not None and length > contract.max_chars:
        violations.append(
            _violation(ViolationType.TOO_LONG, f"{length} chars > max_chars {contract.max_chars}")
        )
    for name, pattern in contract.required_patterns:
        found = budget.search(pattern, answer)
        if found is None:
            violations.append(
                _violation(ViolationType.MISSING_REQUIRED, f"pattern '{name}' timed out; not verified")
            )
        elif not found:
            violations.append(_violation(ViolationType.MISSING_REQUIRED, f"pattern '{name}' not found"))
    if contract.json_schema is not None:
        parsed, value = parse_json_output(answer)
        problems = schema_problems(value, contract.json_schema) if parsed else ["output is not JSON"]
        violations.extend(_violation(ViolationType.MISSING_REQUIRED, problem) for problem in problems)
    for name, pattern in contract.forbidden_patterns:
        found = budget.search(pattern, output)
        if found is None:
            violations.append(
                _violation(ViolationType.FORBIDDEN_PRESENT, f"pattern '{name}' timed out; not verified")
            )
        elif found:
            violations.append(_violation(ViolationType.FORBIDDEN_PRESENT, f"pattern '{name}' found"))
    if not contract.allow_refusal and is_refusal(answer):
        violations.append(_violation(ViolationType.REFUSAL, "the output is a refusal"))
    if not contract.allow_reasoning:
        leak = find_reasoning_leak(output, reasoning_text)
        if leak is not None:
            violations.append(_violation(ViolationType.REASONING_LEAKED, leak))
    if contract.claims is not None:
        kinds = find_claims(answer, contract.claims.allowed)
        for kind in sorted(set(kinds)):
            violations.append(
                _violation(
                    ViolationType.UNEARNED_CLAIM, f"{kinds.count(kind)} {kind} claim(s) not in claims.allowed"
                )
            )
    other = other_question_detail(answer, prompt, other_prompts, other_answers)
    if other is not None:
        violations.append(_violation(ViolationType.ANSWER_TO_OTHER_QUESTION, other))
    if contract.language is not None:
        violations.extend(
            _violation(violation_type, detail)
            for violation_type, detail in language_violations(answer, contract.language)
        )
    return violations
