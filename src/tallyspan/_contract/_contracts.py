"""Contracts: what a stage's deliverable must look like, loaded from YAML, TOML, a mapping or objects.

A contracts file::

    contracts:
      weekly_report:
        language: ja
        min_chars: 200
        required: ['^判定[:：]\\s*(合格|不合格)', {name: verdict, pattern: 'verdict'}]
        forbidden: ['<\\|im_end\\|>']
        claims: {allowed: ['導入企業300社']}
    default:                      # optional: spans whose stage has no contract
      allow_refusal: false
    match:                        # optional: bind by stage / agent name / model (glob patterns)
      - {agent: reviewer, model: 'gpt-4o*', contract: weekly_report}

``ContractSet.contract_for`` resolves in that order of precedence: the first ``match`` rule whose
keys all match, then the contract named like the stage, then ``default``. Regexes are compiled at
load with the ``regex`` package (multi-line mode: ``^`` and ``$`` match at line ends), after a check
of their structure, and matched with a time limit shared by a span's patterns, so a hostile pattern
cannot hang or exhaust the process (``tallyspan._contract._patterns``). Files are read within bounds
(``tallyspan._contract._contract_files``, and ``_contract_yaml`` for YAML); every failure is a
``ContractError`` naming the file, the stage, the field and the line. Loading goes one way: this module
imports the reading and the parsing, which never import it nor each other's callers.

Nothing here reads the environment: the file size limit comes from the caller (``tallyspan.load_contracts``,
in ``tallyspan._contract_loading``, passes ``TALLYSPAN_CONTRACTS_MAX_BYTES``).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from tallyspan._contract._contract_files import (
    MAX_FILE_BYTES,
    TOP_KEYS,
    check_shape,
    contract_error_at,
    parse_toml,
    read_contracts_text,
    wrap_node,
)
from tallyspan._contract._patterns import REGEX_TIMEOUT_S as REGEX_TIMEOUT_S  # where it was first defined
from tallyspan._contract._patterns import PatternLoadBudget, compile_pattern, contract_flags, load_budget_of
from tallyspan._errors import ContractError

if TYPE_CHECKING:
    import regex  # loads with the first pattern (tallyspan._contract._patterns)
    import yaml  # only a YAML file loads it (tallyspan._contract._contract_yaml)
    from jsonschema.protocols import Validator  # jsonschema loads only for a contract with json_schema

__all__ = [
    "DEFAULT_MAX_REPEATED_SHARE",
    "SUPPORTED_LANGUAGES",
    "Claims",
    "Contract",
    "ContractSet",
    "MatchRule",
    "NamedPattern",
    "compile_schema",
    "load_contracts",
]

#: Languages a contract may require; the engine's language checks judge these (``tallyspan._engine._language``).
SUPPORTED_LANGUAGES = frozenset({"ja", "en", "zh", "ko"})
#: The default of ``Contract.max_repeated_share``: more than this share of the output repeating one unit
#: back to back is ``degenerate_repetition`` (``tallyspan._engine._repetition``).
DEFAULT_MAX_REPEATED_SHARE = 0.5


def compile_schema(schema: dict[str, Any]) -> Validator:
    """A validator for ``schema`` (its own ``$schema`` draft, else 2020-12): a contract's ``json_schema``,
    compiled at load; the engine validates the output with it (``tallyspan._engine._jsonschema``).

    Raises:
        jsonschema.exceptions.SchemaError: when the schema itself is invalid.
    """
    from jsonschema import validators  # only a contract with a json_schema loads jsonschema

    validator_class = validators.validator_for(schema, default=validators.Draft202012Validator)
    validator_class.check_schema(schema)
    return validator_class(schema)


class NamedPattern(BaseModel):
    """A regex with a name to report instead of the pattern itself."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    pattern: str


class Claims(BaseModel):
    """The claims an organisation may make (customers, adoption figures, superlatives)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Plain defaults, not default_factory=list: pydantic copies them per instance all the same, and
    # inspecting a builtin factory's signature costs milliseconds at import.
    allowed: list[str] = []


class Contract(BaseModel):
    """What a stage's output must look like; ``Contract(**mapping)`` takes a contracts file's entry.

    Raises:
        pydantic.ValidationError: on direct construction with a bad field (``load_contracts`` turns it
            into a ``ContractError`` naming the file, stage, field and line).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    language: str | None = None
    """Required output language: ja, en, zh or ko."""
    min_chars: int | None = Field(default=None, ge=0)
    """Least characters, whitespace and stripped reasoning excluded."""
    max_chars: int | None = Field(default=None, ge=0)
    required: list[str | NamedPattern] = []
    """Regexes that must each match somewhere in the output."""
    forbidden: list[str | NamedPattern] = []
    """Regexes that must not match anywhere in the output."""
    json_schema: dict[str, Any] | None = None
    """The output must be JSON valid against this JSON Schema (the ``jsonschema`` library, draft 2020-12
    unless ``$schema`` names another); checked at load."""
    allow_refusal: bool = False
    allow_reasoning: bool = False
    allow_off_topic: bool = False
    """When false (the default) and the prompt is known, an answer that ignores it is ``off_topic``."""
    max_repeated_share: float | None = Field(default=DEFAULT_MAX_REPEATED_SHARE, gt=0, le=1)
    """Most of the output that may be one unit repeated back to back; more is ``degenerate_repetition``.
    None turns the check off."""
    claims: Claims | None = None
    """When set, claims not covered by ``claims.allowed`` are ``unearned_claim``."""
    deadline_s: float | None = Field(default=None, gt=0)
    """A call longer than this is a ``timeout``."""
    max_wait_s: float | None = Field(default=None, ge=0)
    """Waiting longer than this between ``enqueued_at`` and the model call is ``scheduler_starvation``."""

    _required: tuple[tuple[str, regex.Pattern[str]], ...] = PrivateAttr(default=())
    _forbidden: tuple[tuple[str, regex.Pattern[str]], ...] = PrivateAttr(default=())
    _schema_validator: Validator | None = PrivateAttr(default=None)

    @field_validator("language")
    @classmethod
    def _known_language(cls, value: str | None) -> str | None:
        if value is None:
            return None
        code = value.strip().lower().replace("_", "-").split("-")[0]
        if code not in SUPPORTED_LANGUAGES:
            raise ValueError(
                f"unsupported language {value!r}; use one of {', '.join(sorted(SUPPORTED_LANGUAGES))}"
            )
        return code

    @field_validator("required", "forbidden")
    @classmethod
    def _patterns_compile(
        cls, value: list[str | NamedPattern], info: ValidationInfo
    ) -> list[str | NamedPattern]:
        # Checked before compiling (a pattern can ask the compiler for gigabytes), within the load's budget.
        budget = load_budget_of(info.context)
        for index, item in enumerate(value):
            pattern = item.pattern if isinstance(item, NamedPattern) else item
            try:
                compile_pattern(pattern, contract_flags(), budget)
            except ValueError as exc:
                raise ValueError(f"{exc} (item {index})") from exc
        return value

    @field_validator("json_schema")
    @classmethod
    def _schema_is_valid(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            from jsonschema.exceptions import SchemaError

            try:
                compile_schema(value)
            except SchemaError as exc:
                raise ValueError(f"invalid JSON Schema: {exc.message}") from exc
        return value

    @model_validator(mode="after")
    def _compile(self, info: ValidationInfo) -> Contract:
        if self.min_chars is not None and self.max_chars is not None and self.min_chars > self.max_chars:
            raise ValueError(f"min_chars {self.min_chars} > max_chars {self.max_chars}")
        budget = load_budget_of(info.context)
        self._required = tuple(_compiled(item, budget) for item in self.required)
        self._forbidden = tuple(_compiled(item, budget) for item in self.forbidden)
        self._schema_validator = None
        if self.json_schema is not None:
            self._schema_validator = compile_schema(self.json_schema)
        return self

    @property
    def required_patterns(self) -> tuple[tuple[str, regex.Pattern[str]], ...]:
        """(name, compiled regex) of each required pattern."""
        return self._private("_required")  # type: ignore[no-any-return]

    @property
    def forbidden_patterns(self) -> tuple[tuple[str, regex.Pattern[str]], ...]:
        """(name, compiled regex) of each forbidden pattern."""
        return self._private("_forbidden")  # type: ignore[no-any-return]

    @property
    def schema_validator(self) -> Validator | None:
        """The compiled ``json_schema`` validator, or None when the contract has no schema."""
        return self._private("_schema_validator")  # type: ignore[no-any-return]

    def _private(self, name: str) -> Any:
        # Read on every check: pydantic's __getattr__ for a private attribute costs microseconds, the
        # dict it keeps them in a lookup.
        private = self.__pydantic_private__
        return private[name] if private is not None else getattr(self, name)


def _compiled(item: str | NamedPattern, budget: PatternLoadBudget | None) -> tuple[str, regex.Pattern[str]]:
    if isinstance(item, NamedPattern):
        return item.name, compile_pattern(item.pattern, contract_flags(), budget)
    return item, compile_pattern(item, contract_flags(), budget)


class LocatedValueError(ValueError):
    """A validator's ``ValueError`` about a value below the model it checks, at ``location`` (a path
    from that model, as pydantic's): pydantic places an error of a model validator at the model itself
    (in a file, its first line), so the loader adds the path to name the field and its line."""

    def __init__(self, message: str, location: tuple[str | int, ...]) -> None:
        super().__init__(message)
        self.location = location


class MatchRule(BaseModel):
    """Binds a contract to spans by stage, agent name and/or model (glob patterns, all must match)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    contract: str
    stage: str | None = None
    agent: str | None = None
    model: str | None = None

    @model_validator(mode="after")
    def _has_a_key(self) -> MatchRule:
        if self.stage is None and self.agent is None and self.model is None:
            raise ValueError("a match rule needs at least one of stage, agent, model")
        return self

    def matches(self, stage: str | None, agent_name: str | None, model: str | None) -> bool:
        """True when every key the rule sets matches the span's value."""
        for pattern, value in ((self.stage, stage), (self.agent, agent_name), (self.model, model)):
            if pattern is not None and (value is None or not fnmatch.fnmatchcase(value, pattern)):
                return False
        return True


class ContractSet(BaseModel):
    """Contracts by stage, an optional default and ``match`` rules; see :meth:`contract_for`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    contracts: dict[str, Contract] = {}
    default: Contract | None = None
    match: list[MatchRule] = []

    @model_validator(mode="after")
    def _rules_name_contracts(self) -> ContractSet:
        for index, rule in enumerate(self.match):
            if rule.contract not in self.contracts and not (rule.contract == "default" and self.default):
                import difflib  # a bad file only

                message = f"a match rule names an unknown contract {rule.contract!r}"
                known = [*self.contracts, *(["default"] if self.default else [])]
                meant = difflib.get_close_matches(rule.contract, known, n=1, cutoff=0.75)
                if meant:
                    message += f"; did you mean {meant[0]!r}?"
                # A check of the whole set has no place of its own: it says where in the file it failed.
                raise LocatedValueError(message, ("match", index, "contract"))
        return self

    def contract_for(
        self, stage: str | None, agent_name: str | None = None, model: str | None = None
    ) -> tuple[str, Contract] | None:
        """Return (name, contract) for a span, or None when no contract applies.

        Order: the first ``match`` rule that matches, the contract named ``stage``, the default.
        """
        for rule in self.match:
            if rule.matches(stage, agent_name, model):
                if rule.contract in self.contracts:
                    return rule.contract, self.contracts[rule.contract]
                if self.default is not None:
                    return "default", self.default
        if stage is not None and stage in self.contracts:
            return stage, self.contracts[stage]
        if self.default is not None:
            return "default", self.default
        return None


# --- loading ---------------------------------------------------------------------------------------


def load_contracts(
    source: Any, *, max_bytes: int = MAX_FILE_BYTES, limit_setting: str | None = None
) -> ContractSet:
    """Load contracts from a file path (YAML or TOML), a mapping, a list, or a ``ContractSet``.

    ``tallyspan.load_contracts`` (``tallyspan._contract_loading``) is this with the file limit of the
    environment; see its docstring for ``source``.

    Args:
        source: a path, a mapping, a list of contracts or a ``ContractSet``.
        max_bytes: the largest file read (a larger one is refused unread).
        limit_setting: what sets ``max_bytes``, named in the refusal of a larger file.

    Raises:
        ContractError: naming the file, the stage, the field and (YAML) the line.
    """
    if isinstance(source, ContractSet):
        return source
    if isinstance(source, (str, os.PathLike)):
        return _load_file(Path(source), max_bytes, limit_setting)
    if isinstance(source, Contract):
        return ContractSet(default=source)
    if isinstance(source, Mapping):
        return _from_mapping(dict(source), file=None, node=None)
    if isinstance(source, Sequence) and not isinstance(source, (bytes, bytearray)):
        return _from_list(source)
    raise ContractError(
        f"contracts must be a path, a mapping, a list or a ContractSet, not {type(source).__name__}"
    )


def _load_file(path: Path, max_bytes: int, limit_setting: str | None) -> ContractSet:
    file = str(path)
    try:
        text = read_contracts_text(path, max_bytes, limit_setting=limit_setting)
        data, node = _parsed(text, file, toml=path.suffix.lower() == ".toml")
        if data is None:
            return ContractSet()
        if not isinstance(data, Mapping):
            raise ContractError("the file must hold a mapping with a 'contracts' section", file=file, line=1)
        return _from_mapping(dict(data), file=file, node=node)
    except ContractError:
        raise
    except Exception as exc:  # any other failure is still a bad file: name it, never a bare traceback
        raise ContractError(f"cannot load the contracts: {type(exc).__name__}: {exc}", file=file) from exc


def _parsed(text: str, file: str, *, toml: bool) -> tuple[Any, yaml.Node | None]:
    """The data of a contracts file and, for YAML, its node tree (for line numbers)."""
    if toml:
        return parse_toml(text, file), None
    # Imported here: PyYAML costs about 10 ms to import, and contracts given as a mapping never need it.
    from tallyspan._contract._contract_yaml import parse_yaml

    return parse_yaml(text, file)


def _from_mapping(data: dict[str, Any], *, file: str | None, node: yaml.Node | None) -> ContractSet:
    if not TOP_KEYS.intersection(data):
        _refuse_misspelt_section(data, file=file, node=node)
        data = {"contracts": data}  # the short form: {stage: contract}
        node = wrap_node(node)
    check_shape(data, file=file, node=node)
    budget = PatternLoadBudget()
    try:
        return ContractSet.model_validate(data, context=budget.context())
    except ValidationError as exc:
        raise _contract_error(exc, file=file, node=node) from exc


def _refuse_misspelt_section(data: dict[str, Any], *, file: str | None, node: yaml.Node | None) -> None:
    """``contract:`` (or ``matches:``) read as the short form would be a stage: say what was meant."""
    import difflib  # only the short form gets here, and only a near miss needs it

    for key, value in data.items():
        if not isinstance(key, str):
            continue
        meant = difflib.get_close_matches(key.strip().lower(), sorted(TOP_KEYS), n=1, cutoff=0.75)
        looks_like_a_contract = isinstance(value, Mapping) and set(value) <= set(Contract.model_fields)
        if meant and not looks_like_a_contract:
            raise contract_error_at(
                f"unknown top-level key {key!r}; did you mean {meant[0]!r}? "
                f"(a contracts file has the sections {', '.join(sorted(TOP_KEYS))})",
                (key,),
                file=file,
                node=node,
            )


def _from_list(items: Sequence[Any]) -> ContractSet:
    contracts: dict[str, Contract] = {}
    budget = PatternLoadBudget()
    for index, item in enumerate(items):
        if isinstance(item, Contract):
            contracts[f"stage_{index}"] = item
            continue
        if not isinstance(item, Mapping) or not isinstance(item.get("stage"), str):
            raise ContractError(f"item {index} must be a Contract or a mapping with a 'stage' key")
        fields = {key: value for key, value in item.items() if key != "stage"}
        check_shape({"contracts": {item["stage"]: fields}}, file=None, node=None)
        try:
            contracts[item["stage"]] = Contract.model_validate(fields, context=budget.context())
        except ValidationError as exc:
            raise _contract_error(exc, file=None, node=None, stage=item["stage"]) from exc
    return ContractSet(contracts=contracts)


_FIELD_NAMES = sorted(
    {
        *TOP_KEYS,
        *Contract.model_fields,
        *MatchRule.model_fields,
        *Claims.model_fields,
        *NamedPattern.model_fields,
    }
)


def _contract_error(
    exc: ValidationError, *, file: str | None, node: yaml.Node | None, stage: str | None = None
) -> ContractError:
    error = exc.errors()[0]
    location = tuple(error["loc"])
    message = str(error["msg"])
    cause = error.get("ctx", {}).get("error")
    if isinstance(cause, LocatedValueError):
        location, message = (*location, *cause.location), str(cause)
    if error["type"] == "extra_forbidden":
        import difflib  # a bad file only

        message = "unknown field"
        meant = difflib.get_close_matches(
            str(location[-1]) if location else "", _FIELD_NAMES, n=1, cutoff=0.75
        )
        if meant:
            message += f"; did you mean {meant[0]!r}?"
    elif message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    return contract_error_at(message, location, file=file, node=node, stage=stage)
