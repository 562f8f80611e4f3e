"""tallyspan's exporters: the embedded SQLite store, the ledger log records and OTLP span export."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tallyspan_exporters._components import ledger_sinks_component, otlp_component
    from tallyspan_exporters._ledger_logs import OTLPLedgerSink
    from tallyspan_exporters._ledger_store import SQLiteLedgerSink
    from tallyspan_exporters._store import SQLiteSpanExporter, StoreProcessor, store_component

# Each name loads its module on first use: instrument() takes the components through entry points that
# name this package, and must not pay for OTLP (requests, the SDK's logs) when nothing exports over it.
_LAZY = {
    "OTLPLedgerSink": "_ledger_logs",
    "SQLiteLedgerSink": "_ledger_store",
    "SQLiteSpanExporter": "_store",
    "StoreProcessor": "_store",
    "ledger_sinks_component": "_components",
    "otlp_component": "_components",
    "store_component": "_store",
}

__all__ = [
    "OTLPLedgerSink",
    "SQLiteLedgerSink",
    "SQLiteSpanExporter",
    "StoreProcessor",
    "ledger_sinks_component",
    "otlp_component",
    "store_component",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
