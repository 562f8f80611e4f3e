"""Linear contract patterns (they cannot backtrack) are searched without ``regex``'s timeout, whose
process-CPU clock costs more than the search; every other pattern, and a linear one on a text past the
step bound, keeps the timeout."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tallyspan._contract._patterns import (
    UNTIMED_STEPS,
    PatternBudget,
    compile_pattern,
    contract_flags,
    linear_nodes,
)


def _compiled(pattern: str) -> Any:
    return compile_pattern(pattern, contract_flags())


@pytest.mark.parametrize(
    ("pattern", "nodes"),
    [
        (r"<\|im_end\|>", 11),
        ("毎週|週次", 7),
        (r"(?i)\bverdict\b", 10),
        (r"^判定[:：](合格|不合格)$", 15),
        (r"[[a-z]--[aeiou]]x", 3),
        (r"\p{Han}\d", 3),
        (r"(?=abc)x", 7),
        (r"(?>ab|cd)", 9),
        (r"a.b", 4),
        (r"\Aok\Z", 5),
    ],
)
def test_patterns_without_repetition_are_linear(pattern: str, nodes: int) -> None:
    assert linear_nodes(_compiled(pattern)) == nodes


@pytest.mark.parametrize(
    ("pattern", "nodes"),
    [
        (r"sk-[A-Za-z0-9]{20,}", 25),  # the run starts after "-", which the class cannot match
        (r"^判定[:：]\s*(合格|不合格)", 16),  # a set of plain characters guards it too
        (r"verdict:\s*?(pass|fail)", 23),  # lazy
        (r"[ab]\s++c", 5),  # possessive
        (r"colou?r", 8),
        (r"x\p{Han}+", 4),
    ],
)
def test_one_repeated_class_right_after_a_character_it_cannot_match_is_linear(
    pattern: str, nodes: int
) -> None:
    assert linear_nodes(_compiled(pattern)) == nodes


@pytest.mark.parametrize(
    "pattern",
    [
        r"\s*b",  # nothing before the run: every start position may rescan it
        r"a[a-z]*b",  # the guard is in the class
        r"[a-c]\s+c",  # a range guards nothing here (only plain characters are reasoned about)
        r"[ab]b+",
        r"[^ab]\s+c",  # a negated set matches nearly everything, spaces included
        r"\p{Han}\p{Han}+",
        r"(?i)sk-[a-z]+",  # case folding is not reasoned about
        r"a\s*b\s*c",  # two repetitions
        r"a(?:\s)*b",
        r"a(?:ab|cd){3}",  # a repeated alternation
        r"a.*b",
        r"(x+x+)+y",
        r"(a)\1",  # a back-reference
        r"(?:foo){e<=1}",  # a fuzzy match
        r"(a|b(?R))",  # recursion
        r"(a)?(?(1)b|c)",  # a conditional
        r"(?=a+)b",  # a repetition inside a look-around
    ],
)
def test_patterns_that_can_backtrack_are_not_linear(pattern: str) -> None:
    assert linear_nodes(_compiled(pattern)) is None


def test_only_patterns_compiled_by_the_contracts_are_known_linear() -> None:
    import regex

    direct = regex.compile("only-compiled-directly", contract_flags())
    assert linear_nodes(direct) is None  # not checked, so never searched untimed
    _compiled("only-compiled-directly")
    # An equal pattern (same text and flags) shares the verdict: a sequence of its 22 characters.
    assert linear_nodes(direct) == 1 + len("only-compiled-directly")


def _budget_that_times_out_at_once() -> PatternBudget:
    # A timed search with this per-pattern limit gives up before it starts: it answers None.
    return PatternBudget(total_s=10.0, per_pattern_s=1e-9)


def test_a_linear_pattern_is_searched_without_the_timeout() -> None:
    token = _compiled(r"<\|im_end\|>")
    assert _budget_that_times_out_at_once().search(token, "答えです。<|im_end|>") is True
    assert _budget_that_times_out_at_once().search(token, "答えです。") is False


def test_a_linear_pattern_past_the_step_bound_is_timed() -> None:
    token = _compiled(r"<\|im_end\|")  # a sequence of 9 characters: 10 nodes
    assert linear_nodes(token) == 10
    at_bound = "あ" * (UNTIMED_STEPS // 10)
    assert len(at_bound) * 10 == UNTIMED_STEPS
    assert _budget_that_times_out_at_once().search(token, at_bound) is False  # still untimed
    assert _budget_that_times_out_at_once().search(token, at_bound + "あ") is None  # timed: gave up


def test_a_pattern_that_can_backtrack_is_always_timed() -> None:
    nested = _compiled(r"(?:x+x+)+y")
    assert _budget_that_times_out_at_once().search(nested, "xxxy") is None
    assert PatternBudget().search(nested, "xxxy") is True


def test_a_guarded_repetition_finds_what_the_timed_search_finds() -> None:
    secret = _compiled(r"sk-[A-Za-z0-9]{20,}")
    for text, found in (
        ("key sk-" + "a" * 20, True),
        ("key sk-" + "a" * 19, False),
        ("sk-sk-" + "b" * 25, True),
    ):
        assert _budget_that_times_out_at_once().search(secret, text) is found  # untimed
        assert (secret.search(text, timeout=1.0) is not None) is found


def test_the_budget_counts_the_checking_threads_work_not_its_waits() -> None:
    """Behind a busy app the worker can wait for the GIL longer than the whole budget between two of a
    span's patterns; that wait is not the patterns' cost, and must not leave them unverified. The clock
    starts at the first timed search, so the wait comes after it: 0.2 s of wall time against a budget
    of 0.05 s, and next to no CPU time of this thread."""
    budget = PatternBudget(total_s=0.05)
    nested = _compiled("(a+a+)+b")  # can backtrack: always timed, so it starts the budget's clock
    assert budget.search(nested, "aaab") is True
    waited_until = time.monotonic() + 0.2
    while time.monotonic() < waited_until:  # waiting, as for the GIL: wall time passes, CPU time does not
        time.sleep(0.05)
    assert budget.search(nested, "aaab") is True
    assert budget.search(_compiled("毎週"), "毎週の報告") is True
    assert not budget.exhausted
    assert budget.check_errors == ()


def test_a_pattern_gets_no_more_than_what_is_left_of_the_budget() -> None:
    """The per-pattern limit is 10 s, the span's budget 0.05 s: a catastrophic pattern is stopped when
    the budget is spent, not when its own limit is. Measured in this thread's CPU time, what the budget
    promises, so a loaded host cannot fail it (``regex`` times a search in the process's CPU time, which
    other threads only make shorter)."""
    budget = PatternBudget(total_s=0.05, per_pattern_s=10.0)
    catastrophic = _compiled("(x+x+)+y")
    started = time.thread_time()
    assert budget.search(catastrophic, "x" * 5_000) is None  # not verified
    spent = time.thread_time() - started
    assert spent < 1.0, spent  # its own limit would be 10 s


def test_a_spent_budget_runs_no_pattern_linear_or_not() -> None:
    budget = PatternBudget(total_s=0.0)
    assert budget.search(_compiled("毎週"), "毎週") is None
    assert budget.exhausted
    assert budget.check_errors == ("pattern_budget",)


def test_a_pattern_let_go_takes_its_linear_verdict_with_it() -> None:
    import gc

    import regex

    from tallyspan._contract import _patterns

    regex.purge()  # regex's own cache holds compiled patterns too
    pattern = compile_pattern("let-go-before-its-id-is-reused", contract_flags())
    key = id(pattern)
    assert _patterns._LINEAR_NODE_COUNTS[key] == 1 + len("let-go-before-its-id-is-reused")
    regex.purge()
    del pattern
    gc.collect()
    assert key not in _patterns._LINEAR_NODE_COUNTS
