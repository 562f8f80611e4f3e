"""Failures as data: the failure-log and error-diagnosis exports (``tallyspan export``).

Private: the command and the pytest plugin are the way in. ``tallyspan._store._store_traces`` is what a
source yields (the store: ``tallyspan._store._store_queries.iter_traces``; an OTLP JSON file:
``_otlp_file``), ``_failure_logs`` and ``_diagnosis`` turn it into records, ``_terms`` says each verdict
in words, ``_judge`` asks a model.
The records' JSON Schemas are in ``schemas/``.
"""

from __future__ import annotations

import sys
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # importlib.abc's name is deprecated from 3.12 and gone in 3.14; the new home exists from 3.11.
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

__all__ = ["schema_file"]


def schema_file(name: str) -> Traversable:
    """The JSON Schema ``name`` (``failure-log`` or ``diagnosis``) shipped in ``schemas/``."""
    return resources.files(__name__).joinpath("schemas").joinpath(f"{name}.schema.json")
