"""tallyspan's OpenTelemetry span processors: the wrapping chain, the checks and the ledger."""

from tallyspan_processors._checks import ChecksProcessor, checks_component
from tallyspan_processors._enrich import enriched_copy
from tallyspan_processors._ledger import LedgerProcessor, ledger_component
from tallyspan_processors._worker import OffThreadProcessor, worker_component
from tallyspan_processors._wrapping import WrappingProcessor

__all__ = [
    "ChecksProcessor",
    "LedgerProcessor",
    "OffThreadProcessor",
    "WrappingProcessor",
    "checks_component",
    "enriched_copy",
    "ledger_component",
    "worker_component",
]
