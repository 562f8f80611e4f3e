"""reconcile() and the log-argument parser: every rule of the double-entry ledger, with its edge cases."""

from __future__ import annotations

import pytest

from tallyspan import ledger
from tallyspan.ledger import Claim, Discrepancy, LogToolSpec, Observed, parse_log_arguments, reconcile


def _pairs(result: ledger.Reconciliation) -> list[tuple[str, str | None]]:
    return [(d.type, d.call_id) for d in result.discrepancies]


def test_each_call_followed_by_its_claim_balances() -> None:
    result = reconcile(
        [Observed("c1", "search", "succeeded", 0), Observed("c2", "book", "failed", 2)],
        [Claim("c1", "search", "succeeded", "found 3", 1), Claim("c2", "book", "failed", "", 3)],
    )
    assert result == ledger.Reconciliation(True, True, (), ())


def test_empty_run_balances() -> None:
    assert reconcile([], []) == ledger.Reconciliation(True, True, (), ())


@pytest.mark.parametrize(
    ("outcome", "kind"),
    [("succeeded", "unlogged_call"), ("failed", "unlogged_failure"), ("rejected", "unlogged_refusal")],
)
def test_unlogged_call_is_named_by_its_outcome(outcome: str, kind: str) -> None:
    result = reconcile(
        [Observed("c1", "search", "succeeded", 0), Observed("c2", "refund", outcome, 2)],
        [Claim("c1", "search", "succeeded", "", 1)],
    )
    assert result.balanced is False
    assert result.protocol_ok is True
    assert result.discrepancy_types == (kind,)
    assert result.discrepancies == (Discrepancy(kind, "c2", f"refund {outcome}, not logged"),)


def test_calls_without_any_claim_add_ledger_missing() -> None:
    result = reconcile([Observed("c1", "a", "succeeded", 0), Observed("c2", "b", "rejected", 1)], [])
    assert result.discrepancy_types == ("ledger_missing", "unlogged_call", "unlogged_refusal")
    assert _pairs(result) == [("unlogged_call", "c1"), ("ledger_missing", None), ("unlogged_refusal", "c2")]
    assert result.balanced is False


def test_a_malformed_claim_is_still_a_ledger_so_no_ledger_missing() -> None:
    result = reconcile(
        [Observed("c1", "a", "succeeded", 0)], [Claim(None, None, None, seq=1, malformed="bad")]
    )
    assert result.discrepancy_types == ("malformed_log", "unlogged_call")


@pytest.mark.parametrize(
    ("claimed_tool", "claimed_outcome", "detail"),
    [
        ("cancel", "failed", "tool 'book' claimed as 'cancel'"),
        ("book", "succeeded", "failed claimed as succeeded"),
        ("cancel", "rejected", "tool 'book' claimed as 'cancel'; failed claimed as rejected"),
    ],
)
def test_pair_with_different_tool_or_outcome_is_mismatched(
    claimed_tool: str, claimed_outcome: str, detail: str
) -> None:
    result = reconcile(
        [Observed("c1", "book", "failed", 0)], [Claim("c1", claimed_tool, claimed_outcome, "", 1)]
    )
    assert result.discrepancies == (Discrepancy("mismatched_result", "c1", detail),)
    assert result.balanced is False
    assert result.protocol_ok is True


def test_outcome_synonyms_match() -> None:
    result = reconcile([Observed("c1", "book", "failed", 0)], [Claim("c1", "book", "error", "", 1)])
    assert result.balanced is True


def test_second_claim_for_a_call_is_duplicate_and_first_is_the_pair() -> None:
    result = reconcile(
        [Observed("c1", "book", "succeeded", 0)],
        [Claim("c1", "book", "succeeded", "", 1), Claim("c1", "book", "failed", "", 2)],
    )
    # the first claim (by seq) pairs and matches; the second, although it differs, is only a duplicate
    assert _pairs(result) == [("duplicate_log", "c1")]
    assert result.balanced is False


def test_duplicate_is_decided_by_seq_not_by_list_order() -> None:
    result = reconcile(
        [Observed("c1", "book", "succeeded", 0)],
        [Claim("c1", "book", "failed", "", 2), Claim("c1", "book", "succeeded", "", 1)],
    )
    assert _pairs(result) == [("duplicate_log", "c1")]


def test_reused_call_id_pairs_claims_with_its_calls_in_turn() -> None:
    # real agents reuse ids within a run (tau-bench gpt-4o airline, task 0): each claim takes the
    # earliest call of that id still unpaired; only a claim beyond them is a duplicate
    result = reconcile(
        [Observed("c1", "get_user", "succeeded", 0), Observed("c1", "calculate", "succeeded", 2)],
        [
            Claim("c1", "get_user", "succeeded", "", 1),
            Claim("c1", "calculate", "succeeded", "", 3),
            Claim("c1", "calculate", "succeeded", "", 4),
        ],
    )
    assert _pairs(result) == [("duplicate_log", "c1")]


def test_claim_for_no_observed_call_is_phantom() -> None:
    result = reconcile([], [Claim("c9", "refund", "succeeded", "refunded", 0)])
    assert result.discrepancies == (
        Discrepancy("phantom_log", "c9", "refund claimed succeeded, never called"),
    )
    assert result.balanced is False


def test_pairing_is_by_id_never_by_time() -> None:
    # c2's claim comes first but names c2; c1's claim names c1: both pair, by id
    result = reconcile(
        [Observed("c1", "a", "succeeded", 0), Observed("c2", "a", "succeeded", 1)],
        [Claim("c2", "a", "succeeded", "", 2), Claim("c1", "a", "succeeded", "", 3)],
    )
    assert result.balanced is True
    assert _pairs(result) == [("out_of_order_log", "c1")]  # c1 was logged after the next call (c2)


def test_claim_without_id_pairs_with_earliest_unpaired_call_of_its_tool() -> None:
    result = reconcile(
        [
            Observed("c1", "search", "succeeded", 0),
            Observed("c2", "search", "failed", 2),
            Observed("c3", "book", "succeeded", 4),
        ],
        [
            Claim(None, "search", "succeeded", "", 1),
            Claim(None, "search", "failed", "", 3),
            Claim(None, "book", "succeeded", "", 5),
        ],
    )
    assert result == ledger.Reconciliation(True, True, (), ())


def test_claim_with_id_is_paired_before_claims_without_id() -> None:
    # the id-less claim comes first but must not take c1, which the second claim names
    result = reconcile(
        [Observed("c1", "search", "succeeded", 0), Observed("c2", "search", "succeeded", 1)],
        [Claim(None, "search", "succeeded", "", 2), Claim("c1", "search", "succeeded", "", 3)],
    )
    assert result.balanced is True
    # c1's claim (seq 3) came after the next call (seq 1); the id-less one pairs c2 and is in place
    assert _pairs(result) == [("out_of_order_log", "c1")]


def test_claim_without_id_and_no_unpaired_call_is_phantom() -> None:
    result = reconcile(
        [Observed("c1", "search", "succeeded", 0)],
        [Claim("c1", "search", "succeeded", "", 1), Claim(None, "search", "succeeded", "", 2)],
    )
    assert _pairs(result) == [("phantom_log", None)]


def test_no_ids_on_either_side_pair_by_tool() -> None:
    result = reconcile(
        [Observed(None, "search", "succeeded", 0), Observed(None, "book", "rejected", 2)],
        [Claim(None, "search", "succeeded", "", 1)],
    )
    assert _pairs(result) == [("unlogged_refusal", None)]


def test_observed_call_without_id_cannot_match_a_claim_with_id() -> None:
    result = reconcile(
        [Observed(None, "search", "succeeded", 0)], [Claim("c1", "search", "succeeded", "", 1)]
    )
    assert result.discrepancy_types == ("phantom_log", "unlogged_call")


def test_early_log_is_out_of_order_but_balanced() -> None:
    result = reconcile([Observed("c1", "book", "succeeded", 1)], [Claim("c1", "book", "succeeded", "", 0)])
    assert result.balanced is True
    assert result.protocol_ok is False
    assert result.discrepancies == (Discrepancy("out_of_order_log", "c1", "logged before the call"),)


def test_late_log_after_the_next_call_is_out_of_order_but_balanced() -> None:
    result = reconcile(
        [Observed("c1", "a", "succeeded", 0), Observed("c2", "b", "succeeded", 1)],
        [Claim("c1", "a", "succeeded", "", 2), Claim("c2", "b", "succeeded", "", 3)],
    )
    assert result.balanced is True
    assert result.discrepancies == (Discrepancy("out_of_order_log", "c1", "logged after the next call"),)


def test_log_after_the_last_call_at_any_distance_is_in_order() -> None:
    result = reconcile([Observed("c1", "a", "succeeded", 0)], [Claim("c1", "a", "succeeded", "", 99)])
    assert result.protocol_ok is True


def test_calls_of_the_log_tool_never_count_as_observed() -> None:
    result = reconcile(
        [Observed("c1", "a", "succeeded", 0), Observed("L1", "log_action", "succeeded", 2)],
        [Claim("c1", "a", "succeeded", "", 1)],
    )
    assert result == ledger.Reconciliation(True, True, (), ())


def test_log_tool_calls_do_not_make_a_later_claim_out_of_order() -> None:
    # the next *ordinary* call bounds the claim, not the log call in between
    result = reconcile(
        [Observed("c1", "a", "succeeded", 0), Observed("L0", "log_action", "succeeded", 1)],
        [Claim("c1", "a", "succeeded", "", 2)],
    )
    assert result.protocol_ok is True


def test_logging_the_log_tool_is_self_logged_and_never_paired() -> None:
    result = reconcile(
        [Observed("c1", "a", "succeeded", 0), Observed("L1", "log_action", "succeeded", 1)],
        [Claim("c1", "a", "succeeded", "", 2), Claim("L1", "log_action", "succeeded", "", 3)],
    )
    assert result.balanced is True
    assert result.protocol_ok is False
    assert result.discrepancies == (Discrepancy("self_logged", "L1", "a claim logs log_action"),)


def test_malformed_claim_breaks_protocol_and_is_never_paired() -> None:
    result = reconcile(
        [Observed("c1", "a", "succeeded", 0)],
        [Claim("c1", "a", None, seq=1, malformed="no outcome"), Claim("c1", "a", "succeeded", "", 2)],
    )
    assert result.balanced is True
    assert result.discrepancies == (Discrepancy("malformed_log", "c1", "no outcome"),)


def test_custom_log_tool_name() -> None:
    result = reconcile(
        [Observed("c1", "a", "succeeded", 0), Observed("R1", "record", "succeeded", 2)],
        [Claim("c1", "a", "succeeded", "", 1), Claim("x", "record", "succeeded", "", 3)],
        log_tool="record",
    )
    assert _pairs(result) == [("self_logged", "x")]


def test_discrepancy_types_are_sorted_and_unique_and_discrepancies_in_seq_order() -> None:
    result = reconcile(
        [
            Observed("c1", "a", "succeeded", 0),
            Observed("c2", "a", "succeeded", 1),
            Observed("c3", "a", "failed", 2),
        ],
        [Claim("c9", "a", "succeeded", "", 3), Claim("c3", "a", "succeeded", "", 4)],
    )
    assert result.discrepancy_types == ("mismatched_result", "phantom_log", "unlogged_call")
    assert _pairs(result) == [
        ("unlogged_call", "c1"),
        ("unlogged_call", "c2"),
        ("phantom_log", "c9"),
        ("mismatched_result", "c3"),
    ]


def test_types_are_the_taxonomy_values() -> None:
    assert {*ledger.BALANCE_TYPES, *ledger.PROTOCOL_TYPES} == {
        t.value
        for t, c in __import__("tallyspan").FAILURE_CLASS_OF.items()
        if c.value == "ledger_discrepancy"
    }


def test_ten_thousand_calls_reconcile_correctly() -> None:
    observed = [Observed(f"c{i}", "t", "succeeded", 2 * i) for i in range(10_000)]
    claims = [Claim(f"c{i}", "t", "succeeded", "", 2 * i + 1) for i in range(10_000) if i != 5000]
    result = reconcile(observed, claims)
    assert _pairs(result) == [("unlogged_call", "c5000")]


# --- parsing the log tool's arguments --------------------------------------------------------------


def test_parse_canonical_arguments() -> None:
    claim = parse_log_arguments(
        '{"call_id": "c1", "tool_name": "book", "claimed_outcome": "succeeded", "summary": "booked"}', seq=4
    )
    assert claim == Claim("c1", "book", "succeeded", "booked", 4)


def test_parse_accepts_the_common_aliases() -> None:
    claim = parse_log_arguments(
        {"log_id": 7, "tool": "book", "outcome": "Error", "action_description": "no seat"}
    )
    assert claim == Claim("7", "book", "failed", "no seat", 0)


def test_parse_without_call_id_is_fine() -> None:
    assert parse_log_arguments({"tool_name": "book", "outcome": "denied"}) == Claim(
        None, "book", "rejected", ""
    )


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ("{not json", "arguments are not valid JSON"),
        ("[1, 2]", "arguments are not a JSON object"),
        ('"text"', "arguments are not a JSON object"),
        ({"call_id": "c1", "claimed_outcome": "succeeded"}, "no tool name"),
        ({"call_id": "c1", "tool_name": 3, "claimed_outcome": "succeeded"}, "no tool name"),
        ({"call_id": "c1", "tool_name": "book"}, "no outcome"),
        (
            {"tool_name": "book", "claimed_outcome": "maybe"},
            "unknown outcome (not succeeded, failed or rejected)",
        ),
        (None, "arguments are not a JSON object"),
    ],
)
def test_unparseable_arguments_give_a_malformed_claim(arguments: object, reason: str) -> None:
    claim = parse_log_arguments(arguments, seq=3)  # type: ignore[arg-type]
    assert claim.malformed == reason
    assert claim.seq == 3


def test_configurable_argument_names() -> None:
    spec = LogToolSpec(
        tool="journal", call_id=("ref",), tool_name=("what",), outcome=("result",), summary=("note",)
    )
    claim = parse_log_arguments({"ref": "c1", "what": "book", "result": "ok", "note": "n"}, spec=spec)
    assert claim == Claim("c1", "book", "succeeded", "n", 0)


def test_bad_log_tool_spec_is_a_config_error() -> None:
    from tallyspan import ConfigError

    with pytest.raises(ConfigError, match="non-empty"):
        LogToolSpec(tool="")
    with pytest.raises(ConfigError, match=r"LogToolSpec\.outcome"):
        LogToolSpec(outcome=())


def test_huge_and_hostile_arguments_do_not_crash() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    assert parse_log_arguments(deep).malformed is not None
    big = '{"tool_name": "t", "outcome": "ok", "summary": "' + "x" * 1_000_000 + '"}'
    assert parse_log_arguments(big).claimed_outcome == "succeeded"


def test_every_discrepancy_detail_is_exact() -> None:
    """The details are what `tallyspan ledger` shows: pinned, with an outcome no rule names."""
    result = reconcile(
        [Observed("c1", "search", "succeeded", 0), Observed("c2", "fetch", "timed_out", 2)],
        [
            Claim("c1", "search", "succeeded", "", 1),
            Claim("c1", "search", "succeeded", "", 3),
            Claim("c9", "refund", "succeeded", "", 4),
            Claim(None, "book", "succeeded", "", 5),
        ],
    )
    assert result.discrepancies == (
        Discrepancy("unlogged_call", "c2", "fetch timed_out, not logged"),  # an unknown outcome
        Discrepancy("duplicate_log", "c1", "claimed again"),
        Discrepancy("phantom_log", "c9", "refund claimed succeeded, never called"),
        Discrepancy("phantom_log", None, "book claimed succeeded, never called"),
    )
    unlogged = reconcile(
        [Observed("c1", "search", "succeeded", 0), Observed("c2", "fetch", "succeeded", 1)], []
    )
    assert Discrepancy("ledger_missing", None, "2 calls, no log") in unlogged.discrepancies


def test_an_empty_argument_counts_as_absent_and_the_next_name_is_read() -> None:
    claim = parse_log_arguments(
        {"call_id": "", "log_id": "c7", "tool_name": "", "tool": "book", "outcome": "ok"}
    )
    assert claim == Claim("c7", "book", "succeeded", "", 0)


def test_a_summary_that_is_not_text_is_kept_as_text() -> None:
    assert parse_log_arguments({"tool": "book", "outcome": "ok", "summary": 42}).summary == "42"
    assert parse_log_arguments({"tool": "book", "outcome": "ok", "summary": None}).summary == ""


def test_a_malformed_claim_keeps_what_did_parse() -> None:
    """The ledger view shows the call id (and the summary) of a claim it could not pair."""
    no_tool = parse_log_arguments({"call_id": "c1", "outcome": "ok", "summary": "booked"}, seq=5)
    assert no_tool == Claim("c1", None, None, "booked", 5, malformed="no tool name")
    unknown = parse_log_arguments(
        {"call_id": "c1", "tool": "book", "outcome": "maybe", "summary": "s"}, seq=6
    )
    assert unknown == Claim(
        "c1", "book", None, "s", 6, malformed="unknown outcome (not succeeded, failed or rejected)"
    )


def test_a_log_tool_spec_needs_names_that_are_non_empty_strings() -> None:
    from tallyspan import ConfigError

    with pytest.raises(ConfigError, match=r"^the log tool name must be a non-empty string$"):
        LogToolSpec(tool="")
    for names in [("",), ("call_id", "")]:
        with pytest.raises(
            ConfigError, match=r"^LogToolSpec\.call_id must be a non-empty tuple of argument names$"
        ):
            LogToolSpec(call_id=names)


@pytest.mark.parametrize(("value", "outcome"), [(True, "succeeded"), (False, "failed"), (" Done ", "succeeded"),
                                                ("DENIED", "rejected"), (1, None), ("maybe", None)])  # fmt: skip
def test_normalize_outcome_reads_booleans_and_words(value: object, outcome: str | None) -> None:
    assert ledger.normalize_outcome(value) == outcome


def test_a_claim_without_id_pairs_the_earliest_call_of_its_tool_even_when_the_last_is_one() -> None:
    result = reconcile(
        [Observed("c1", "search", "succeeded", 0), Observed("c2", "search", "succeeded", 2)],
        [Claim(None, "search", "succeeded", "", 1)],
    )
    assert _pairs(result) == [("unlogged_call", "c2")]


def test_a_claim_at_the_same_position_as_a_call_is_not_after_it() -> None:
    same_as_its_call = reconcile(
        [Observed("c1", "a", "succeeded", 1)], [Claim("c1", "a", "succeeded", "", 1)]
    )
    assert same_as_its_call.discrepancies == (
        Discrepancy("out_of_order_log", "c1", "logged before the call"),
    )
    at_the_next_call = reconcile(
        [Observed("c1", "a", "succeeded", 0), Observed("c2", "a", "succeeded", 2)],
        [Claim("c1", "a", "succeeded", "", 2), Claim("c2", "a", "succeeded", "", 3)],
    )
    assert at_the_next_call.protocol_ok is True
