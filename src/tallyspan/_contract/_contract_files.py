"""Reading a contracts file within bounds, and errors that say where the problem is.

The file may come from someone else (a tenant's configuration, a shared repository), so reading it
must not hang or exhaust the process that calls ``instrument()``:

- only a regular file is read (``/dev/zero``, a FIFO, a directory are refused unopened), at most the
  limit the caller gives (:data:`MAX_FILE_BYTES`, 1 MiB, unless ``TALLYSPAN_CONTRACTS_MAX_BYTES`` says
  otherwise: the runtime reads it); a larger file is refused unread;
- it must be UTF-8 (a byte-order mark is accepted); UTF-16, UTF-32 and Latin-1 are named as such;
- YAML is parsed by libyaml when present (``tallyspan._contract._contract_yaml``, imported by the loader
  only for a YAML file; it takes its bounds from here), composed by a loader that counts: more than
  :data:`MAX_DEPTH` levels of nesting or :data:`MAX_NODES` values is refused while composing, before
  Python's recursion limit; a number longer than :data:`MAX_NUMBER_CHARS` characters is refused
  before it is converted;
- every mapping, whatever its source, is walked once (:func:`check_shape`) with the same bounds,
  aliases expanded, so pydantic never sees a billion laughs or a 5,000-digit integer.

Every refusal is a ``ContractError`` naming the file, and where the data says so the stage, the field
and the line (:func:`contract_error_at`).
"""

from __future__ import annotations

import codecs
import os
import stat
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from tallyspan._errors import ContractError

if TYPE_CHECKING:
    import yaml

__all__ = [
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_NODES",
    "MAX_NUMBER_CHARS",
    "TOP_KEYS",
    "check_shape",
    "contract_error_at",
    "parse_toml",
    "read_contracts_text",
    "wrap_node",
]

MAX_FILE_BYTES: Final = 1 << 20
"""Largest contracts file read unless the caller says otherwise: 1 MiB. A contracts file is a few
kilobytes; parsing 1 MiB of YAML takes about a second."""
MAX_DEPTH: Final = 32
"""Deepest nesting of mappings and lists in a contracts file (``json_schema`` included)."""
MAX_NODES: Final = 100_000
"""Most values (mappings, lists, scalars) in one set of contracts, every alias expanded."""
MAX_NUMBER_CHARS: Final = 40
"""Longest integer accepted, in characters; Python refuses to convert more than 4,300 digits anyway."""
_MAX_INT_BITS: Final = 64
TOP_KEYS: Final = frozenset({"contracts", "default", "match"})
"""The sections of a contracts file; a mapping with none of them is the short form ``{stage: contract}``."""

_TEXT_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)
_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
_SAVE_AS_UTF8 = "save it as UTF-8"
_SHOWN_LEVELS = 8


# --- reading ---------------------------------------------------------------------------------------


def read_contracts_text(path: Path, max_bytes: int, *, limit_setting: str | None = None) -> str:
    """The text of the contracts file at ``path``: a regular file of at most ``max_bytes``, UTF-8.

    ``limit_setting`` names what sets ``max_bytes`` (an environment variable), for the refusal of a larger
    file to say how to raise it.

    Raises:
        ContractError: naming the file; nothing is read from a file that is not regular or too large.
    """
    file = str(path)
    try:
        info = os.stat(path)
        _check_regular(info, file, max_bytes, limit_setting)
        # O_NONBLOCK: should the path turn into a FIFO after the stat, open() must not wait for a writer.
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
        with os.fdopen(descriptor, "rb") as stream:
            _check_regular(os.fstat(stream.fileno()), file, max_bytes, limit_setting)
            data = stream.read(max_bytes + 1)  # a file that grows after the stat is still cut short
    except OSError as exc:
        raise ContractError(f"cannot read the contracts file: {exc.strerror or exc}", file=file) from exc
    if len(data) > max_bytes:
        raise ContractError(_too_large(len(data), max_bytes, limit_setting, at_least=True), file=file)
    return _decoded(data, file)


def _check_regular(info: os.stat_result, file: str, max_bytes: int, limit_setting: str | None) -> None:
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _FILE_KINDS if test(info.st_mode)), "not a regular file")
        raise ContractError(f"the contracts file is {kind}, not a regular file; refused unread", file=file)
    if info.st_size > max_bytes:
        raise ContractError(_too_large(info.st_size, max_bytes, limit_setting), file=file)


def _too_large(size: int, max_bytes: int, limit_setting: str | None, *, at_least: bool = False) -> str:
    more = "more than " if at_least else ""
    set_by = f" ({limit_setting} sets it)" if limit_setting else ""
    return (
        f"the contracts file holds {more}{size - (1 if at_least else 0):,} bytes, more than the limit of "
        f"{max_bytes:,}{set_by}; refused unread"
    )


def _decoded(data: bytes, file: str) -> str:
    for bom, encoding in _TEXT_BOMS:
        if data.startswith(bom):
            raise ContractError(f"the contracts file is {encoding} text; {_SAVE_AS_UTF8}", file=file, line=1)
    if b"\x00" in data:
        line = data.count(b"\n", 0, data.index(b"\x00")) + 1
        raise ContractError(
            f"the contracts file holds NUL bytes (UTF-16 or UTF-32 text, or not text); {_SAVE_AS_UTF8}",
            file=file,
            line=line,
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ContractError(
            f"the contracts file is not UTF-8: byte 0x{data[exc.start]:02x} at line {line}, column {column} "
            f"(Latin-1 or another legacy encoding?); {_SAVE_AS_UTF8}",
            file=file,
            line=line,
        ) from exc


# --- parsing ---------------------------------------------------------------------------------------


def parse_toml(text: str, file: str) -> Any:
    """The data of a TOML contracts file (a YAML file is parsed by ``tallyspan._contract._contract_yaml``).

    Raises:
        ContractError: invalid syntax, or over a limit while parsing; names the file and the line.
    """
    # Imported here: a YAML file (the usual case) does not pay for the TOML parser's regexes.
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ContractError(f"invalid TOML: {exc}", file=file) from exc
    except (RecursionError, ValueError) as exc:
        if isinstance(exc, RecursionError):
            message = "nested too deeply"
        elif "integer string conversion" in str(exc):
            message = "a number of more than 4,300 digits"
        else:
            message = f"cannot read a value: {exc}"
        position = _toml_position(exc)
        if position is None:
            raise ContractError(message, file=file) from exc
        line = text.count("\n", 0, position) + 1
        raise contract_error_at(
            message, _toml_location(text, position), file=file, node=None, line=line
        ) from exc


def _toml_position(exc: BaseException) -> int | None:
    """Where in the text tomllib was when it failed: its parser passes ``pos`` down every call."""
    position: int | None = None
    trace = exc.__traceback__
    while trace is not None:
        frame = trace.tb_frame
        if frame.f_globals.get("__name__", "").startswith(("tomllib", "tomli")):
            value = frame.f_locals.get("pos")
            if isinstance(value, int):
                position = value
        trace = trace.tb_next
    return position


def _toml_location(text: str, position: int) -> tuple[Any, ...]:
    """The table header above ``position`` and the key of its line, as a path: (contracts, stage, key)."""
    start = text.rfind("\n", 0, position) + 1
    line = text[start : text.find("\n", position) if "\n" in text[position:] else len(text)]
    header: list[str] = []
    for previous in reversed(text[:start].splitlines()):
        stripped = previous.strip()
        if stripped.startswith("[") and "]" in stripped:
            header = _toml_dotted(stripped.strip("[]").split("]")[0])
            break
    key = line.split("=", 1)[0] if "=" in line else ""
    return (*header, *_toml_dotted(key))


def _toml_dotted(key: str) -> list[str]:
    return [part.strip().strip("\"'") for part in key.split(".") if part.strip()]


# --- the shape of the data -------------------------------------------------------------------------


def check_shape(data: Any, *, file: str | None, node: yaml.Node | None) -> None:
    """Refuse data nested deeper than :data:`MAX_DEPTH`, with more than :data:`MAX_NODES` values (every
    alias or shared object counted each time it appears) or with an integer over 64 bits.

    Raises:
        ContractError: naming the file, the stage, the field and (YAML) the line.
    """
    visited = 0
    stack: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    while stack:
        value, path = stack.pop()
        visited += 1
        if visited > MAX_NODES:
            raise contract_error_at(
                f"more than {MAX_NODES:,} values (aliases counted each time they are used)",
                path,
                file=file,
                node=node,
            )
        if isinstance(value, Mapping):
            children: Sequence[tuple[Any, Any]] = [(key, item) for key, item in value.items()]
        elif isinstance(value, (list, tuple)):
            children = list(enumerate(value))
        else:
            if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > _MAX_INT_BITS:
                raise contract_error_at(
                    f"a number larger than {_MAX_INT_BITS} bits", path, file=file, node=node
                )
            continue
        if len(path) >= MAX_DEPTH:
            raise contract_error_at(f"nested deeper than {MAX_DEPTH} levels", path, file=file, node=node)
        stack.extend((item, (*path, key)) for key, item in children)


# --- where ----------------------------------------------------------------------------------------


def contract_error_at(
    message: str,
    location: Sequence[Any],
    *,
    file: str | None,
    node: yaml.Node | None,
    stage: str | None = None,
    line: int | None = None,
) -> ContractError:
    """A ``ContractError`` for the value at ``location`` (a pydantic error path or a data path).

    ``("contracts", "report", "required", 0)`` names the stage ``report`` and the field
    ``required.0``; ``("default", "min_chars")`` the stage ``default``; the line comes from ``node``
    (the composed YAML tree) unless given.
    """
    location = tuple(location)
    if stage is None and len(location) >= 2 and location[0] == "contracts":
        stage, rest = str(location[1]), location[2:]
    elif stage is None and location and location[0] == "default":
        stage, rest = "default", location[1:]
    else:
        rest = location
    names = [str(part) for part in rest if not str(part).startswith(("str", "NamedPattern"))]
    if len(names) > _SHOWN_LEVELS:  # a path into hostile nesting: its start says where
        names = [*names[:_SHOWN_LEVELS], f"...({len(names)} levels)"]
    field = ".".join(names) if names else None
    if line is None:
        line = _line_of(node, location)
    return ContractError(message, file=file, stage=stage, field=field, line=line)


def _line_of(node: yaml.Node | None, location: tuple[Any, ...]) -> int | None:
    """The 1-based line of the deepest YAML node on ``location`` (pydantic's error path)."""
    if node is None or node.start_mark is None:
        return None
    import yaml  # loaded already: the node comes from it

    line = int(node.start_mark.line) + 1
    for part in location:
        child: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == str(part) and key.start_mark is not None:
                    child, line = value, key.start_mark.line + 1  # a field's error points at its key
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            child = node.value[part]
            if child.start_mark is not None:
                line = child.start_mark.line + 1
        if child is None:
            break
        node = child
    return line


def wrap_node(node: yaml.Node | None) -> yaml.Node | None:
    """``node`` under a ``contracts`` key, as the short form ``{stage: contract}`` is read."""
    if node is None:
        return None
    import yaml  # loaded already: the node comes from it

    key = yaml.ScalarNode("tag:yaml.org,2002:str", "contracts", node.start_mark, node.start_mark)
    return yaml.MappingNode("tag:yaml.org,2002:map", [(key, node)], node.start_mark, node.end_mark)
