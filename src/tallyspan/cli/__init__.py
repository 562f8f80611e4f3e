"""The ``tallyspan`` command: reads the embedded store; one module per subcommand.

Each subcommand module defines a ``click.Command`` named ``command`` that returns nothing but data to
the renderer (``_render.emit``); only the group maps our errors to a message and an exit code.
Commands get the shared options through ``@pass_state`` (``tallyspan.cli._state.CliState``).
Exit status: 0 success, 2 bad input (a ``ConfigError``: arguments, configuration, contracts file),
1 any other failure (``tallyspan check``: violations found).
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path
from typing import Any

import click

from tallyspan._config import ENV_DB, resolve_db_path
from tallyspan._errors import ConfigError, TallyspanError
from tallyspan.cli._state import CliState
from tallyspan.cli.check import command as check_command
from tallyspan.cli.demo import command as demo_command
from tallyspan.cli.doctor import command as doctor_command
from tallyspan.cli.export import command as export_command
from tallyspan.cli.ledger import command as ledger_command
from tallyspan.cli.prune import command as prune_command
from tallyspan.cli.report import command as report_command
from tallyspan.cli.spans import command as spans_command

__all__ = ["main"]

_logger = logging.getLogger(__name__)


class _BadInput(click.ClickException):
    """An unusable argument, configuration or contracts file: status 2, as click's usage errors."""

    exit_code = 2


class _Group(click.Group):
    """The group, plus the one place where errors become messages and exit codes."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ConfigError as exc:  # ContractError included: the input, not the store, is at fault
            _logger.debug("tallyspan command got bad input", exc_info=True)
            raise _BadInput(str(exc)) from exc
        except TallyspanError as exc:
            _logger.debug("tallyspan command failed", exc_info=True)
            raise click.ClickException(str(exc)) from exc
        except sqlite3.DatabaseError as exc:
            state = ctx.find_object(CliState)
            where = f" at {state.db_path}" if state is not None else ""
            raise click.ClickException(f"The tallyspan store{where} could not be read: {exc}") from exc


@click.group(cls=_Group)
@click.version_option(package_name="tallyspan", prog_name="tallyspan")
@click.option(
    "--db", "db_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="The store to read. [default: TALLYSPAN_DB, else ./.tallyspan/tallyspan.db]",
)  # fmt: skip
@click.pass_context
def main(ctx: click.Context, db_path: Path | None) -> None:
    """Make the silent failures of LLM agents visible: read what tallyspan.instrument() recorded."""
    given = db_path is not None or bool(os.environ.get(ENV_DB, "").strip())
    ctx.obj = CliState(db_path=resolve_db_path(db_path), db_given=given)


# Plain imports: a command that fails to import is a bug to see at once, not a command quietly missing.
for _command in (report_command, spans_command, ledger_command, check_command, prune_command, demo_command):
    main.add_command(_command)
main.add_command(export_command)
main.add_command(doctor_command)
