"""``tallyspan prune --older-than 7d``: keep the embedded store from growing without end."""

from __future__ import annotations

import re
import time

import click

from tallyspan._store._store_prune import prune
from tallyspan._store._store_queries import open_store
from tallyspan.cli._render import emit, table
from tallyspan.cli._state import CliState, pass_state

__all__ = ["command", "parse_age"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
#: The longest age taken: 200 years reaches back before any span, and keeps the cutoff within SQLite's
#: 64-bit integers (a longer one overflowed them).
MAX_AGE_SECONDS = 200 * 365 * 86400


def parse_age(text: str) -> float:
    """Seconds in an age such as ``90m``, ``36h``, ``7d`` or ``2w``.

    Raises:
        click.BadParameter: the text is not a number followed by one of s, m, h, d, w, or is longer
            than 200 years.
    """
    match = _AGE.fullmatch(text.strip())
    if match is None:
        raise click.BadParameter(f"{text!r} is not an age like 90m, 36h, 7d or 2w", param_hint="--older-than")
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if not seconds <= MAX_AGE_SECONDS:  # also catches inf (a number too long for a float)
        raise click.BadParameter(
            f"{text!r} is longer than {MAX_AGE_SECONDS // (365 * 86400)} years", param_hint="--older-than"
        )
    return seconds


@click.command("prune")
@click.option(
    "--older-than", "older_than", required=True, help="Delete traces that ended longer ago: 36h, 7d, 2w."
)
@click.option("--vacuum", is_flag=True, help="Give the freed pages back to the file system afterwards.")
@click.option("--dry-run", is_flag=True, help="Say what would be deleted; delete nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of text.")
@pass_state
def command(state: CliState, older_than: str, vacuum: bool, dry_run: bool, as_json: bool) -> None:
    """Delete whole traces (spans, runs, violations, both ledger columns) older than an age."""
    cutoff = time.time_ns() - int(parse_age(older_than) * 1e9)
    with open_store(state.db_path, write=not dry_run) as db:
        deleted = prune(db, cutoff, dry_run=dry_run)
        if vacuum and not dry_run:
            db.execute("VACUUM")
    data = {"older_than": older_than, "before_unix_nano": cutoff, "dry_run": dry_run, "deleted": deleted}
    header = f"tallyspan prune{' --dry-run: nothing deleted' if dry_run else ''} — {state.db_path}\n"
    rows = list(deleted.items())
    column = "rows it would delete" if dry_run else "rows deleted"
    emit("prune", data, as_json=as_json, text=lambda _: header + table(["table", column], rows))
