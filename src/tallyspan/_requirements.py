"""Whether an instrumentor's libraries are installed in range, decided without packaging when it can be.

OpenTelemetry's ``get_dependency_conflicts`` parses each requirement with ``packaging``, whose import
(the regexes of its tokenizer and specifiers) costs about 9 ms: paid at every start by an app that
enables one instrumentor. Our instrumentors' requirements are all of the form ``name >= 1.40``. For
such a requirement (operators ``>= <= > < == !=`` over plain releases, no extras, markers or
wildcards) and an installed version that is a plain release too (``1.2.3``: no pre-, post-, dev- or
local part), PEP 440's order is the order of the zero-padded release numbers, so no parser is needed.
Anything else is left to ``get_dependency_conflicts``; so is the text of a conflict, made only when
someone reads it (a missing library is the normal case when every instrumentor is tried).
"""

from __future__ import annotations

import itertools
from collections.abc import Collection
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final

__all__ = [
    "UnmetRequirements",
    "conflict_message",
    "dependency_conflict",
    "requirements_met",
    "satisfies",
    "simple_name",
]

#: Two-character operators first: ``<=`` is not ``<`` followed by ``=1.0``.
_OPERATORS: Final = (">=", "<=", "==", "!=", "<", ">")
_NAME_CHARACTERS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


def _is_release(text: str) -> bool:
    # ASCII digits only: a Unicode digit ("١") is no part of a PEP 440 version.
    return all(part.isascii() and part.isdigit() for part in text.split("."))


def _release(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _parsed(requirement: str) -> tuple[str, list[tuple[str, tuple[int, ...]]]] | None:
    """(name, [(operator, release)]) of a requirement of the simple form, else None.

    Parsed by hand: no regex to compile at import for a check that runs once.
    """
    text = requirement.strip()
    end = 0
    while end < len(text) and text[end] in _NAME_CHARACTERS:
        end += 1
    name = text[:end]
    if not name or not (name[0].isalnum() and name[-1].isalnum()):
        return None
    rest = text[end:].strip()
    clauses: list[tuple[str, tuple[int, ...]]] = []
    for clause in rest.split(",") if rest else ():
        clause = clause.strip()
        operator = next((candidate for candidate in _OPERATORS if clause.startswith(candidate)), None)
        if operator is None:
            return None
        number = clause[len(operator) :].strip()
        if not _is_release(number):
            return None
        clauses.append((operator, _release(number)))
    return name, clauses


def _compare(installed: tuple[int, ...], wanted: tuple[int, ...]) -> int:
    """-1, 0 or 1, as PEP 440 orders two plain releases (the shorter padded with zeros)."""
    for have, want in itertools.zip_longest(installed, wanted, fillvalue=0):
        if have != want:
            return -1 if have < want else 1
    return 0


_HOLDS: Final = {
    ">=": lambda order: order >= 0,
    "<=": lambda order: order <= 0,
    ">": lambda order: order > 0,
    "<": lambda order: order < 0,
    "==": lambda order: order == 0,
    "!=": lambda order: order != 0,
}


def simple_name(requirement: str) -> str | None:
    """The distribution a requirement of the simple form names; None for any other form."""
    parsed = _parsed(requirement)
    return None if parsed is None else parsed[0]


def satisfies(requirement: str, installed: Any) -> bool | None:
    """Whether the ``installed`` version meets a requirement of the simple form; None when only
    packaging can tell (another form, or a version that is not a plain release)."""
    parsed = _parsed(requirement)
    if parsed is None or not isinstance(installed, str) or not _is_release(installed):
        return None  # a pre-release (excluded unless asked for), a post- or local version: packaging's rules
    have = _release(installed)
    return all(_HOLDS[operator](_compare(have, wanted)) for operator, wanted in parsed[1])


def _met(requirement: str) -> bool | None:
    name = simple_name(requirement)
    if name is None:
        return None
    try:
        installed = version(name)
    except PackageNotFoundError:
        return False
    return satisfies(requirement, installed)


def requirements_met(requirements: Collection[str]) -> bool | None:
    """True when every requirement is installed in range, False when one is not, None when one is of a
    form decided by packaging only (the caller asks ``get_dependency_conflicts``)."""
    undecided = False
    for requirement in requirements:
        met = _met(requirement)
        if met is False:
            return False
        undecided = undecided or met is None
    return None if undecided else True


class UnmetRequirements:
    """Requirements found unmet; ``str()`` is OpenTelemetry's text of the conflict, made when read."""

    def __init__(self, requirements: Collection[str]) -> None:
        self.requirements = tuple(requirements)

    def conflict(self) -> Any:
        """OpenTelemetry's ``DependencyConflict`` for these requirements (loads packaging), or None."""
        from opentelemetry.instrumentation.dependencies import get_dependency_conflicts

        return get_dependency_conflicts(self.requirements)

    def __str__(self) -> str:
        return str(self.conflict() or f"{', '.join(self.requirements)} not installed")

    def __repr__(self) -> str:
        return f"UnmetRequirements({self.requirements!r})"


def dependency_conflict(requirements: Collection[str]) -> UnmetRequirements | None:
    """None when ``requirements`` are installed in range, else what is unmet.

    Decided without packaging for the simple form (see the module's docstring), by
    ``get_dependency_conflicts`` otherwise.
    """
    met = requirements_met(requirements)
    if met is None:
        unmet = UnmetRequirements(requirements)
        return unmet if unmet.conflict() is not None else None
    return None if met else UnmetRequirements(requirements)


def conflict_message(conflict: Any, subject: str = "This instrumentation") -> str:
    """What OpenTelemetry says of a ``DependencyConflict`` (its ``_format_message``), in the same words
    whatever its release: before 0.61b0 only ``str()`` gave a terser 'DependencyConflict: requested: ...'."""
    required, found = getattr(conflict, "required", None), getattr(conflict, "found", None)
    if required:
        if found:
            return (
                f'{subject} only instruments "{required}", but currently installed version '
                f'("{found}") falls outside of that range, so nothing can be instrumented.'
            )
        return (
            f'{subject} only instruments "{required}", but no installed version was found, '
            "so nothing can be instrumented."
        )
    required_any = getattr(conflict, "required_any", None)
    found_any = getattr(conflict, "found_any", None)
    if required_any:
        if found_any:
            return (
                f'{subject} instruments any of "{_listed(required_any)}", but currently installed '
                f'version(s) ("{_listed(found_any)}") fall outside of that range, so nothing can be '
                "instrumented."
            )
        return (
            f'{subject} requires any of "{_listed(required_any)}", but none are installed, so nothing '
            "can be instrumented."
        )
    return f"{subject} has an unknown dependency conflict, so nothing can be instrumented."


def _listed(requirements: Collection[str]) -> str:
    return ", ".join(str(requirement) for requirement in requirements)
