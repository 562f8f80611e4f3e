"""Contracts: the pydantic model, loading from YAML/TOML/mappings/lists, match rules and clear errors."""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest

import tallyspan
from tallyspan import Contract, ContractError, ContractSet, load_contracts
from tallyspan._contract._contracts import NamedPattern

YAML = """\
contracts:
  weekly_report:
    language: ja            # required output language
    min_chars: 200
    max_chars: 8000
    required: ['^判定[:：]\\s*(合格|不合格)', {name: verdict, pattern: 'verdict'}]
    forbidden: ['<\\|im_end\\|>']
    allow_refusal: false
    allow_reasoning: false
    claims: {allowed: ['導入企業300社']}
    deadline_s: 60
    max_wait_s: 300
  triage:
    json_schema: {type: object, required: [priority]}
default:
  allow_refusal: true
match:
  - {agent: reviewer, model: 'gpt-4o*', contract: triage}
  - {stage: 'weekly_*', contract: weekly_report}
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_contract_takes_exactly_the_fields_of_a_contracts_file() -> None:
    contract = Contract(
        language="ja",
        min_chars=200,
        max_chars=8000,
        required=[r"^判定[:：]", {"name": "verdict", "pattern": "verdict"}],  # type: ignore[list-item]
        forbidden=[r"<\|im_end\|>"],
        json_schema={"type": "object"},
        allow_refusal=False,
        allow_reasoning=False,
        claims={"allowed": ["導入企業300社"]},  # type: ignore[arg-type]
        deadline_s=60,
        max_wait_s=300,
    )
    assert contract.required[1] == NamedPattern(name="verdict", pattern="verdict")
    assert [name for name, _ in contract.required_patterns] == [r"^判定[:：]", "verdict"]
    assert contract.claims is not None
    assert contract.claims.allowed == ["導入企業300社"]
    with pytest.raises(pydantic.ValidationError, match="extra"):
        Contract(min_char=3)  # type: ignore[call-arg]
    defaults = Contract()
    assert (defaults.allow_refusal, defaults.allow_reasoning, defaults.claims, defaults.language) == (
        False,
        False,
        None,
        None,
    )


def test_contract_language_is_normalised_and_checked() -> None:
    assert Contract(language="ja-JP").language == "ja"
    assert Contract(language="EN").language == "en"
    with pytest.raises(pydantic.ValidationError, match="unsupported language 'fr'"):
        Contract(language="fr")


def test_yaml_file_loads_contracts_default_and_match_rules(tmp_path: Path) -> None:
    contracts = load_contracts(_write(tmp_path, "contracts.yaml", YAML))
    assert isinstance(contracts, ContractSet)
    assert sorted(contracts.contracts) == ["triage", "weekly_report"]
    weekly = contracts.contracts["weekly_report"]
    assert (weekly.language, weekly.min_chars, weekly.deadline_s, weekly.max_wait_s) == ("ja", 200, 60, 300)
    assert contracts.default == Contract(allow_refusal=True)


def test_contract_for_prefers_match_rules_then_stage_then_default(tmp_path: Path) -> None:
    contracts = load_contracts(str(_write(tmp_path, "contracts.yml", YAML)))
    assert contracts.contract_for("weekly_report") == ("weekly_report", contracts.contracts["weekly_report"])
    assert contracts.contract_for("weekly_sales")[0] == "weekly_report"  # type: ignore[index]
    assert contracts.contract_for("triage")[0] == "triage"  # type: ignore[index]
    assert contracts.contract_for(None, "reviewer", "gpt-4o-mini")[0] == "triage"  # type: ignore[index]
    assert contracts.contract_for("weekly_report", "reviewer", "gpt-4o")[0] == "triage"  # type: ignore[index]
    assert contracts.contract_for("unknown", "reviewer", "llama3")[0] == "default"  # type: ignore[index]
    assert contracts.contract_for(None) == ("default", Contract(allow_refusal=True))
    without_default = load_contracts({"contracts": {"a": {}}})
    assert without_default.contract_for(None) is None
    assert without_default.contract_for("b") is None


def test_toml_file_loads_the_same_form(tmp_path: Path) -> None:
    toml = """\
[contracts.weekly_report]
language = "ja"
min_chars = 200
required = ['^判定[:：]', { name = "verdict", pattern = "verdict" }]

[default]
allow_reasoning = true

[[match]]
model = "qwen*"
contract = "weekly_report"
"""
    contracts = load_contracts(_write(tmp_path, "contracts.toml", toml))
    assert contracts.contracts["weekly_report"].min_chars == 200
    assert contracts.contract_for(None, None, "qwen2.5-14b")[0] == "weekly_report"  # type: ignore[index]
    assert contracts.default == Contract(allow_reasoning=True)


def test_mappings_lists_objects_and_sets_all_load() -> None:
    short = load_contracts({"report": {"min_chars": 10}})
    assert short.contracts["report"].min_chars == 10
    listed = load_contracts([{"stage": "report", "language": "ja"}, {"stage": "triage", "max_chars": 10}])
    assert listed.contracts["triage"].max_chars == 10
    objects = load_contracts([Contract(min_chars=1), Contract(min_chars=2)])
    assert objects.contracts["stage_1"].min_chars == 2
    single = load_contracts(Contract(language="ja"))
    assert single.contract_for("anything") == ("default", Contract(language="ja"))
    assert load_contracts(short) is short


@pytest.mark.parametrize(
    ("text", "stage", "field", "line", "message"),
    [
        (
            "contracts:\n  report:\n    language: ja\n    min_chars: -5\n",
            "report",
            "min_chars",
            4,
            "greater than or equal",
        ),
        ("contracts:\n  report:\n    min_char: 5\n", "report", "min_char", 3, "unknown field"),
        ("contracts:\n  report:\n    language: fr\n", "report", "language", 3, "unsupported language"),
        (
            "contracts:\n  report:\n    language: ja\n    required:\n      - 'ok'\n      - '(unclosed'\n",
            "report",
            "required",
            4,
            "invalid regex '(unclosed'",
        ),
        (
            "contracts:\n  report:\n    forbidden:\n      - {name: x}\n",
            "report",
            "forbidden.0",
            4,
            "",
        ),
        (
            "contracts:\n  a:\n    min_chars: 10\n    max_chars: 5\n",
            "a",
            None,
            2,
            "min_chars 10 > max_chars 5",
        ),
        ("default:\n  deadline_s: 0\n", "default", "deadline_s", 2, "greater than 0"),
    ],
)
def test_a_bad_yaml_file_names_the_file_stage_field_and_line(
    tmp_path: Path, text: str, stage: str, field: str | None, line: int, message: str
) -> None:
    path = _write(tmp_path, "contracts.yaml", text)
    with pytest.raises(ContractError) as raised:
        load_contracts(path)
    error = raised.value
    assert (error.file, error.stage, error.line) == (str(path), stage, line)
    assert error.field == field or (
        field is not None and error.field is not None and error.field.startswith(field)
    )
    assert message in str(error)
    assert str(error).startswith(f"{path}:{line}, stage {stage!r}")
    assert error.__cause__ is not None


def test_a_match_rule_naming_an_unknown_contract_fails() -> None:
    with pytest.raises(ContractError, match="unknown contract 'nope'"):
        load_contracts({"contracts": {"a": {}}, "match": [{"stage": "x", "contract": "nope"}]})
    with pytest.raises(ContractError, match="at least one of stage, agent, model"):
        load_contracts({"contracts": {"a": {}}, "match": [{"contract": "a"}]})


def test_a_match_rule_naming_an_unknown_contract_names_its_line_and_the_contract_meant(
    tmp_path: Path,
) -> None:
    """The check spans the whole file (rules against contracts): it used to name the file's first line."""
    text = (
        "# the agents' contracts\n"
        "contracts:\n"
        "  weekly_report:\n"
        "    language: ja\n"
        "\n"
        "match:\n"
        "  - stage: 'weekly_*'\n"
        "    contract: weekly_report\n"
        "  - agent: reporter\n"
        "    contract: weekly_reprot\n"
    )
    path = _write(tmp_path, "contracts.yaml", text)
    with pytest.raises(ContractError) as raised:
        load_contracts(path)
    assert (raised.value.line, raised.value.stage, raised.value.field) == (10, None, "match.1.contract")
    assert str(raised.value) == (
        f"{path}:10, field 'match.1.contract': a match rule names an unknown contract 'weekly_reprot'; "
        "did you mean 'weekly_report'?"
    )
    with pytest.raises(ContractError) as raised:
        load_contracts({"contracts": {"a": {}}, "match": [{"stage": "x", "contract": "zzz"}]})
    assert str(raised.value) == "field 'match.0.contract': a match rule names an unknown contract 'zzz'"


def test_broken_yaml_and_toml_syntax_fail_with_the_line(tmp_path: Path) -> None:
    with pytest.raises(ContractError) as raised:
        load_contracts(_write(tmp_path, "c.yaml", "contracts:\n  a: [unclosed\n  b: 1\n"))
    assert raised.value.line is not None
    assert raised.value.line >= 2
    assert "invalid YAML" in str(raised.value)
    assert isinstance(raised.value.__cause__, Exception)
    with pytest.raises(ContractError, match="invalid TOML"):
        load_contracts(_write(tmp_path, "c.toml", "[contracts.a\nmin_chars = 1\n"))


def test_missing_file_and_wrong_shapes_fail_clearly(tmp_path: Path) -> None:
    with pytest.raises(ContractError, match="cannot read the contracts file") as raised:
        load_contracts(tmp_path / "missing.yaml")
    assert raised.value.file == str(tmp_path / "missing.yaml")
    with pytest.raises(ContractError, match="must hold a mapping"):
        load_contracts(_write(tmp_path, "list.yaml", "- a\n- b\n"))
    with pytest.raises(ContractError, match="not int"):
        load_contracts(42)
    with pytest.raises(ContractError, match="'stage' key"):
        load_contracts([{"min_chars": 1}])
    with pytest.raises(ContractError) as from_list:
        load_contracts([{"stage": "s", "min_chars": "many"}])
    assert (from_list.value.stage, from_list.value.field) == ("s", "min_chars")
    assert load_contracts(_write(tmp_path, "empty.yaml", "")) == ContractSet()


def test_contract_error_is_a_config_error_and_a_value_error() -> None:
    with pytest.raises(tallyspan.ConfigError):
        load_contracts({"contracts": {"a": {"min_chars": -1}}})
    with pytest.raises(ValueError, match="min_chars"):
        load_contracts({"contracts": {"a": {"min_chars": -1}}})


def test_instrument_fails_on_a_bad_contracts_file(tmp_path: Path, tracer_provider: object) -> None:
    path = _write(tmp_path, "contracts.yaml", "contracts:\n  report:\n    max_chars: lots\n")
    with pytest.raises(ContractError) as raised:
        tallyspan.instrument(contracts=path, tracer_provider=tracer_provider, store=None)  # type: ignore[arg-type]
    assert (raised.value.stage, raised.value.field, raised.value.line) == ("report", "max_chars", 3)
    assert tallyspan.instrumentation() is None


@pytest.mark.parametrize("name", ["contracts.yaml", "contracts.toml"])
def test_a_misspelt_contracts_section_names_the_key_and_the_fix(tmp_path: Path, name: str) -> None:
    text = "contract:\n  report:\n    min_chars: 10\n"
    if name.endswith(".toml"):
        text = "[contract.report]\nmin_chars = 10\n"
    path = _write(tmp_path, name, text)
    with pytest.raises(ContractError) as raised:
        load_contracts(path)
    assert (raised.value.file, raised.value.field) == (str(path), "contract")
    assert "unknown top-level key 'contract'; did you mean 'contracts'?" in str(raised.value)
    with pytest.raises(ContractError, match="did you mean 'match'"):
        load_contracts({"matches": [{"stage": "a", "contract": "b"}]})


def test_a_short_form_stage_named_like_a_section_still_loads() -> None:
    assert load_contracts({"defaults": {"min_chars": 3}}).contracts["defaults"].min_chars == 3


def test_unknown_fields_suggest_the_known_one(tmp_path: Path) -> None:
    path = _write(tmp_path, "c.yaml", "contracts:\n  report:\n    min_char: 5\ndefualt:\n  min_chars: 1\n")
    with pytest.raises(ContractError, match="unknown field; did you mean 'min_chars'") as raised:
        load_contracts(path)
    assert (raised.value.stage, raised.value.field, raised.value.line) == ("report", "min_char", 3)


def test_an_empty_contracts_file_warns_once_naming_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _write(tmp_path, "contracts.yaml", "# contracts to come\n")
    with caplog.at_level("WARNING", logger="tallyspan"):
        assert load_contracts(path) == ContractSet()
        assert load_contracts(path) == ContractSet()
    warnings = [
        record.getMessage() for record in caplog.records if "holds no contracts" in record.getMessage()
    ]
    assert warnings == [
        f"the contracts file {path} holds no contracts: no output will be checked against one"
    ]
    with caplog.at_level("WARNING", logger="tallyspan"):
        load_contracts(_write(tmp_path, "full.yaml", "contracts:\n  a: {min_chars: 1}\n"))
    assert len([record for record in caplog.records if "holds no contracts" in record.getMessage()]) == 1


def test_the_file_size_limit_is_a_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, "contracts.yaml", "contracts:\n  report:\n    min_chars: 10\n")
    monkeypatch.setenv("TALLYSPAN_CONTRACTS_MAX_BYTES", "16")
    with pytest.raises(ContractError, match=r"more than the limit of 16 .* refused unread"):
        load_contracts(path)
    monkeypatch.setenv("TALLYSPAN_CONTRACTS_MAX_BYTES", "lots")  # a bad value: warned, default used
    assert load_contracts(path).contracts["report"].min_chars == 10
