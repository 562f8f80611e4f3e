"""``tallyspan check``: check one output against a stage's contract; the verdict as text, or ``--json``.

Exit status: 0 clean, 1 violations, 2 bad input (unreadable file, bad contracts, unknown stage).

::

    tallyspan check --contracts contracts.yaml --stage weekly_report report.txt
    llm-app | tallyspan check --contracts contracts.yaml --stage triage --json -
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tallyspan._contract_loading import load_contracts
from tallyspan._engine._checks import CheckResult, check
from tallyspan._errors import ContractError
from tallyspan.cli._render import emit

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_CLEAN",
    "EXIT_NOT_CHECKED",
    "EXIT_VIOLATIONS",
    "command",
    "format_check",
    "run_check",
]

EXIT_CLEAN = 0
EXIT_VIOLATIONS = 1
EXIT_BAD_INPUT = 2
EXIT_NOT_CHECKED = 3
"""No violation found, but a rule could not run (``check_errors``): the output is not known to be clean."""


class BadInput(click.ClickException):
    """Input the command cannot use; exits with status 2."""

    exit_code = EXIT_BAD_INPUT


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read the {what} {path}: {exc}") from exc


def run_check(
    contracts: Path, stage: str, output: str, prompt: str | None = None, other_prompts: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Check ``output`` against the contract of ``stage`` in ``contracts``; returns the JSON data.

    Raises:
        BadInput: the contracts cannot be loaded or have no contract for ``stage``.
    """
    try:
        contract_set = load_contracts(contracts)
    except ContractError as exc:
        raise BadInput(str(exc)) from exc
    found = contract_set.contract_for(stage)
    if found is None:
        known = ", ".join(sorted(contract_set.contracts)) or "none"
        raise BadInput(f"{contracts}: no contract for stage {stage!r} and no default (stages: {known})")
    name, contract = found
    result: CheckResult = check(output, contract, prompt=prompt, other_prompts=other_prompts)
    return {"stage": stage, "contract": name, **result.to_dict()}


def format_check(data: dict[str, Any]) -> str:
    """The verdict as text: the stage and contract, then each violation with its detail."""
    contract = f"{data['stage']} (contract {data['contract']})"
    violations = data["violations"]
    errors = data.get("check_errors", ())
    if not data["ok"]:
        lines = [f"{contract}: {len(violations)} violation(s)"]
    elif errors:  # no violation found, but not everything was checked: never "ok"
        lines = [f"{contract}: not fully checked, {len(errors)} rule(s) could not run"]
    else:
        lines = [f"{contract}: ok"]
    lines.extend(f"  {v['type']} ({v['failure_class']}): {v['detail']}" for v in violations)
    lines.extend(f"  could not check: {error}" for error in data.get("check_errors", ()))
    return "\n".join(lines)


@click.command(name="check")
@click.option(
    "--contracts", "contracts_path", required=True,
    type=click.Path(dir_okay=False, path_type=Path), help="The contracts file (YAML or TOML).",
)  # fmt: skip
@click.option("--stage", required=True, help="The stage whose contract applies.")
@click.option(
    "--prompt-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="The prompt the output answers (for answer_to_other_question).",
)  # fmt: skip
@click.option(
    "--other-prompt-file", "other_prompt_files", multiple=True,
    type=click.Path(dir_okay=False, path_type=Path), help="A prompt of another call in flight; repeatable.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of text.")
@click.argument("output_file", required=False, default="-", metavar="[FILE|-]")
def command(
    contracts_path: Path,
    stage: str,
    prompt_file: Path | None,
    other_prompt_files: tuple[Path, ...],
    as_json: bool,
    output_file: str,
) -> None:
    """Check an output (FILE, or stdin with -) against the contract of STAGE; print the verdict.

    Exit status: 0 clean, 1 violations, 2 bad input, 3 no violation found but a rule could not run.
    """
    if output_file == "-":
        try:
            with click.open_file("-", encoding="utf-8") as stdin:
                output = stdin.read()
        except UnicodeDecodeError as exc:
            raise BadInput(f"stdin is not UTF-8 text: {exc}") from exc
    else:
        output = _read(Path(output_file), "output file")
    prompt = _read(prompt_file, "prompt file") if prompt_file is not None else None
    others = tuple(_read(path, "prompt file") for path in other_prompt_files)
    data = run_check(contracts_path, stage, output, prompt, others)
    emit("check", data, as_json=as_json, text=format_check)
    if not data["ok"]:
        raise click.exceptions.Exit(EXIT_VIOLATIONS)
    if data["check_errors"]:
        raise click.exceptions.Exit(EXIT_NOT_CHECKED)
