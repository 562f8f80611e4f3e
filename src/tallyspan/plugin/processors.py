"""What a span processor takes from the core, beside :mod:`tallyspan.plugin`: the check engine
(:func:`check`, :class:`CheckResult`, :class:`Contract`, :class:`ContractSet`), what a run is
(:func:`declares_run`, :func:`is_run_container`), the SDK's span classes a processor may be handed
(``SDK_SPAN_TYPES``) and the metrics through the app's meter provider (:func:`record_violations`,
:func:`record_run`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tallyspan._books._runs import declares_run, is_run_container
from tallyspan._metrics import record_run, record_violations
from tallyspan._span_reading import SDK_SPAN_TYPES

if TYPE_CHECKING:
    from tallyspan._contract._contracts import Contract, ContractSet
    from tallyspan._engine._checks import CheckResult, check

# The check engine and the contracts load on first use (see tallyspan/__init__.py), like the package's.
_LAZY = {"CheckResult", "check", "Contract", "ContractSet"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import tallyspan

    value = getattr(tallyspan, name)
    globals()[name] = value
    return value


__all__ = [
    "SDK_SPAN_TYPES",
    "CheckResult",
    "Contract",
    "ContractSet",
    "check",
    "declares_run",
    "is_run_container",
    "record_run",
    "record_violations",
]
