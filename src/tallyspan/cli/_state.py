"""What the ``tallyspan`` group hands its commands: ``@pass_state`` gives a command the ``CliState``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

__all__ = ["CliState", "pass_state"]


@dataclass(frozen=True)
class CliState:
    """Options of the group that every command shares."""

    db_path: Path
    """The store: ``--db``, else ``TALLYSPAN_DB``, else ``./.tallyspan/tallyspan.db``."""
    db_given: bool = True
    """Whether the user named the store (``--db`` or ``TALLYSPAN_DB``) rather than taking the default."""


pass_state = click.make_pass_decorator(CliState)
"""Decorator passing the group's ``CliState`` as a command's first argument."""
