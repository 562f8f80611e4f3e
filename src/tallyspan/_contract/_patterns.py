"""The contracts' regexes, contained: checked before they are compiled, and timed as a span's whole.

A contract's ``required`` and ``forbidden`` patterns come from a file someone else may write. Two
things in it can hurt the process that loads it, and neither is a syntax error:

- **Compiling.** The ``regex`` compiler unrolls counted repetitions: ``a{1000}`` becomes 1,000 nodes,
  so the 31 characters ``(?:(?:(?:a{1000}){1000}){1000})`` ask for a billion (10-21 s, then 6-8 GB and a
  ``MemoryError``), and ``(?:ab|cd){300000}`` crashes the interpreter. 300,000 alternatives take 42 s.
  :func:`compile_pattern` parses the pattern with ``regex``'s own parser (which builds a small tree and
  unrolls nothing), walks that tree and refuses a pattern longer than :data:`MAX_PATTERN_CHARS`, with
  more than :data:`MAX_ALTERNATIVES` alternatives, nested deeper than :data:`MAX_NESTING`, or whose
  repetitions unroll to more than :data:`MAX_EXPANSION` nodes; only then does it compile. A
  :class:`PatternLoadBudget` bounds one load's patterns together: their number, their total unrolled
  size and the time spent compiling them.
- **Matching.** Backtracking (``(x+x+)+y``) is bounded by ``regex``'s own match timeout. The time is
  shared by all of a span's patterns (:class:`PatternBudget`), so forty slow patterns cost one budget,
  not forty; the span is then marked (``pattern_budget``) and counted (``errors.check_budget``).
  A *linear* pattern (no back-reference, fuzzy match, recursion or conditional; literals, classes,
  anchors and alternations of them, the usual ``forbidden`` token; at most one repetition, of a single
  character class right after a character it cannot match, as in ``sk-[A-Za-z0-9]{20,}``) cannot
  backtrack more than linearly: it makes at most a step or two per node per character. It is searched
  without the timeout where that bound, nodes x characters, is at most :data:`UNTIMED_STEPS`: ``regex``
  times a search with the C library's ``clock()``, the process's CPU time, which costs about 8 µs a call
  in a process whose other threads run (against 2 µs for the whole search).
"""

from __future__ import annotations

import functools
import importlib
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from tallyspan._selfstats import count

if TYPE_CHECKING:
    # ``regex`` (about 8 ms to import) loads with the first pattern compiled: a contract without
    # patterns, and the check of its spans, never need it.
    import regex

__all__ = [
    "COMPILE_BUDGET_S",
    "MAX_ALTERNATIVES",
    "MAX_EXPANSION",
    "MAX_LOAD_EXPANSION",
    "MAX_NESTING",
    "MAX_PATTERNS",
    "MAX_PATTERN_CHARS",
    "PATTERN_BUDGET_ERROR",
    "PATTERN_BUDGET_S",
    "REGEX_TIMEOUT_S",
    "UNTIMED_STEPS",
    "PatternBudget",
    "PatternLoadBudget",
    "compile_pattern",
    "linear_nodes",
    "load_budget_of",
]

MAX_PATTERN_CHARS: Final = 10_000
"""Longest pattern accepted, in characters."""
MAX_ALTERNATIVES: Final = 1_000
"""Most ``|`` alternatives in one pattern (a 10,000-alternative pattern takes 0.4 s to compile)."""
MAX_NESTING: Final = 50
"""Deepest nesting of groups, repetitions and alternatives in one pattern."""
MAX_EXPANSION: Final = 10_000
"""Most nodes one pattern may unroll to: the sum over its parts of the product of the counts of the
repetitions around them (``a{100}`` is 100, ``(?:ab){50}`` 150). About 250 bytes and 0.4 µs each."""
MAX_PATTERNS: Final = 5_000
"""Most patterns in one load (a file, a mapping or a list): each costs about 2 KB compiled."""
MAX_LOAD_EXPANSION: Final = 200_000
"""Most nodes all of one load's patterns may unroll to together (about 50 MB)."""
COMPILE_BUDGET_S: Final = 2.0
"""CPU time (of the loading thread) all of one load's patterns may take to compile; a load over it fails
after the pattern that crossed it (which the limits above keep short). CPU, not wall-clock, time: a busy
host must not refuse a contract file that loads on a quiet one."""
REGEX_TIMEOUT_S: Final = 0.1
"""Time limit for one pattern on one output."""
PATTERN_BUDGET_S: Final = 0.25
"""Time all of one span's patterns may take together on its output."""
PATTERN_BUDGET_ERROR: Final = "pattern_budget"
"""The check error of a span whose patterns ran out of :data:`PATTERN_BUDGET_S`."""
UNTIMED_STEPS: Final = 2_000_000
"""Most steps (nodes x characters) a linear pattern may need to be searched without the timeout: at the
slowest measured here, 1.5 ms for literals (a hundred sharing a prefix, 0.7 ns a step) and 5 ms for a
guarded repetition (``^判定[:：]\\s*(合格|不合格)`` on lines of spaces, 2.6 ns a step), far inside
:data:`REGEX_TIMEOUT_S`."""

_LOAD_BUDGET_KEY: Final = "pattern_load_budget"  # a key of pydantic's validation context, not an attribute
_REPEATS: tuple[str, ...] = ("GreedyRepeat", "LazyRepeat", "PossessiveRepeat")
#: The parse-tree nodes of a linear pattern: each matches a bounded text, or nothing (a position), and
#: none repeats, refers back, recurses, branches on a condition or allows errors. Anything else (a node
#: type a later ``regex`` adds included) makes a pattern timed.
_LINEAR_NODES: Final = frozenset(
    {
        "Sequence", "Branch", "Group", "Atomic", "LookAround", "Character", "String", "Literal", "Any",
        "AnyAll", "AnyU", "Property", "Range", "SetUnion", "SetInter", "SetDiff", "SetSymDiff", "Boundary",
        "DefaultBoundary", "StartOfWord", "EndOfWord", "DefaultStartOfWord", "DefaultEndOfWord",
        "StartOfLine", "StartOfLineU", "EndOfLine", "EndOfLineU", "StartOfString", "EndOfString",
        "EndOfStringLine", "EndOfStringLineU", "SearchAnchor",
    }
)  # fmt: skip
#: Linear patterns compiled so far, with their node counts, by ``id``: a pattern let go (with its contract
#: set) takes its entry with it (``weakref.finalize``), before its id can be another object's. A
#: ``WeakKeyDictionary`` costs a Python-level call and a new weak reference per lookup, four per check.
_LINEAR_NODE_COUNTS: dict[int, int] = {}
_CHILD_ATTRIBUTES = ("subpattern", "items", "branches", "yes_item", "no_item")
_SHOWN_CHARS = 60


class PatternError(ValueError):
    """A pattern that is invalid, or that would cost too much to compile."""


@dataclass(frozen=True)
class _RegexParser:
    """``regex``'s own parser: the same tree the compiler gets, built without unrolling anything."""

    info: Any
    regex_base: type
    source: Any
    parse_pattern: Any
    unscoped_flag_set: type[BaseException]


@functools.cache
def _regex_parser() -> _RegexParser | None:
    """The parser of the installed ``regex``, or None when a release moved it (the cruder bound is used)."""
    try:
        core: Any = importlib.import_module("regex._regex_core")
        return _RegexParser(
            core.Info, core.RegexBase, core.Source, core._parse_pattern, core._UnscopedFlagSet
        )
    except (ImportError, AttributeError):  # pragma: no cover - a regex release that moved its parser
        return None


def contract_flags() -> int:
    """The flags of every contract pattern: multi-line (``^`` and ``$`` at line ends), regex version 1."""
    import regex

    return int(regex.MULTILINE | regex.VERSION1)


@dataclass
class PatternLoadBudget:
    """What one load's patterns may cost together; pass it as pydantic validation context.

    It also keeps each pattern compiled once per load (the model validator asks again).
    """

    max_patterns: int = MAX_PATTERNS
    max_expansion: int = MAX_LOAD_EXPANSION
    compile_budget_s: float = COMPILE_BUDGET_S
    patterns: int = 0
    expansion: int = 0
    compile_s: float = 0.0
    compiled: dict[tuple[str, int], regex.Pattern[str]] = field(default_factory=dict)

    def context(self) -> dict[str, Any]:
        """The pydantic validation context that carries this budget to the validators."""
        return {_LOAD_BUDGET_KEY: self}

    def _charge(self, expansion: int) -> None:
        self.patterns += 1
        self.expansion += expansion
        if self.patterns > self.max_patterns:
            raise PatternError(f"more than {self.max_patterns:,} patterns in one set of contracts")
        if self.expansion > self.max_expansion:
            raise PatternError(
                f"the patterns together unroll to more than {self.max_expansion:,} nodes when compiled"
            )

    def _spend(self, seconds: float) -> None:
        self.compile_s += seconds
        if self.compile_s > self.compile_budget_s:
            raise PatternError(
                f"compiling the patterns took {self.compile_s:.1f} s, more than {self.compile_budget_s:g} s"
            )


def load_budget_of(context: Any) -> PatternLoadBudget | None:
    """The budget a load put in the pydantic validation context, if any."""
    if isinstance(context, dict):
        budget = context.get(_LOAD_BUDGET_KEY)
        if isinstance(budget, PatternLoadBudget):
            return budget
    return None


def compile_pattern(pattern: str, flags: int, budget: PatternLoadBudget | None = None) -> regex.Pattern[str]:
    """Check ``pattern``'s structure, then compile it.

    Raises:
        PatternError: (a ``ValueError``) the pattern is invalid or over a limit; the message quotes
            at most the first 60 characters of it.
    """
    if budget is not None:
        compiled = budget.compiled.get((pattern, flags))
        if compiled is not None:
            return compiled
    import regex  # a contract's load: the first one pays for the import

    expansion, linear = _checked_expansion(pattern, flags)
    if budget is not None:
        budget._charge(expansion)
    started = time.thread_time()
    try:
        compiled = regex.compile(pattern, flags)
    except (regex.error, ValueError, RecursionError) as exc:
        raise PatternError(f"invalid regex {_shown(pattern)}: {exc}") from exc
    if linear and id(compiled) not in _LINEAR_NODE_COUNTS:  # regex's own cache can return one compiled before
        _LINEAR_NODE_COUNTS[id(compiled)] = expansion
        weakref.finalize(compiled, _LINEAR_NODE_COUNTS.pop, id(compiled), None)
    if budget is not None:
        budget.compiled[(pattern, flags)] = compiled
        budget._spend(time.thread_time() - started)
    return compiled


def linear_nodes(pattern: regex.Pattern[str]) -> int | None:
    """The node count of a linear pattern :func:`compile_pattern` made (see the module's docstring), else
    None: the pattern can backtrack, or was not compiled here."""
    return _LINEAR_NODE_COUNTS.get(id(pattern))


def _shown(pattern: str) -> str:
    if len(pattern) <= _SHOWN_CHARS:
        return repr(pattern)
    return f"{pattern[:_SHOWN_CHARS]!r}... ({len(pattern):,} characters)"


def _checked_expansion(pattern: str, flags: int) -> tuple[int, bool]:
    """How many nodes ``pattern`` unrolls to, and whether it is linear; raises PatternError over a limit,
    before compiling."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(
            f"regex {_shown(pattern)} is longer than {MAX_PATTERN_CHARS:,} characters; refused unparsed"
        )
    parser = _regex_parser()
    if parser is None:  # pragma: no cover - see _regex_parser
        return _conservative_expansion(pattern), False
    tree = _parsed(parser, pattern, flags)
    expansion = alternatives = repeats = 0
    linear = True
    stack: list[tuple[Any, int, int]] = [(tree, 1, 1)]  # (node, product of the counts around it, depth)
    while stack:
        node, factor, depth = stack.pop()
        expansion += factor
        if depth > MAX_NESTING:
            raise PatternError(f"regex {_shown(pattern)} nests deeper than {MAX_NESTING} levels")
        if expansion > MAX_EXPANSION:
            raise PatternError(
                f"regex {_shown(pattern)} has counted repetitions that unroll to more than "
                f"{MAX_EXPANSION:,} nodes when compiled (nested or large {{n}} counts); refused uncompiled"
            )
        branches = getattr(node, "branches", None)
        if isinstance(branches, list):
            alternatives += len(branches) - 1
            if alternatives > MAX_ALTERNATIVES:
                raise PatternError(f"regex {_shown(pattern)} has more than {MAX_ALTERNATIVES:,} alternatives")
        kind = type(node).__name__
        if kind in _REPEATS:
            repeats += 1
            # The compiler unrolls the mandatory part of a repetition: {n} and {n,m} cost n copies.
            factor *= max(1, int(getattr(node, "min_count", 1) or 1))
        else:
            linear = linear and kind in _LINEAR_NODES
        stack.extend((child, factor, depth + 1) for child in _children(node, parser.regex_base))
    return expansion, linear and (repeats == 0 or (repeats == 1 and _guarded_repeat(tree)))


def _guarded_repeat(tree: Any) -> bool:
    """True when the pattern's one repetition cannot make it backtrack more than linearly: a repeated
    single character class (``\\s*``, ``[A-Za-z0-9]{20,}``) at the top level, right after a character (or
    a set of characters) the class cannot match (``sk-[A-Za-z0-9]{20,}``, ``^判定[:：]\\s*...``).

    Where that guard matches, the run the repetition takes begins there, and no two such runs overlap
    (the guard's character would lie inside the earlier run, which it cannot match): the runs of all the
    start positions add up to at most the text, each tried against the rest of the pattern once. Case
    folding is not reasoned about: a folded guard or class keeps the pattern timed.
    """
    if type(tree).__name__ != "Sequence":
        return False
    items = getattr(tree, "items", None)
    if not isinstance(items, list):
        return False
    for index, item in enumerate(items):
        if type(item).__name__ not in _REPEATS:
            continue
        body: Any = getattr(item, "subpattern", None)
        if index == 0 or type(body).__name__ not in _CHARACTER_CLASSES or _folded(body):
            return False
        guard_characters = _characters_of(items[index - 1])
        return bool(guard_characters) and not any(body.matches(point) for point in guard_characters)
    return False


#: Parse-tree nodes that match exactly one character, and can say which (``matches``).
_CHARACTER_CLASSES: Final = frozenset(
    {"Character", "Property", "Range", "SetUnion", "SetInter", "SetDiff", "SetSymDiff"}
)


def _folded(node: Any) -> bool:
    return bool(getattr(node, "case_flags", 0))


def _characters_of(node: Any) -> tuple[int, ...]:
    """The code points a guard matches: a plain character, or a set of plain characters; else none."""
    kind = type(node).__name__
    if kind == "Character" and node.positive and not _folded(node):
        return (int(node.value),)
    if kind == "SetUnion" and node.positive and not _folded(node):
        members = getattr(node, "items", None)
        if isinstance(members, (list, tuple)) and all(
            type(member).__name__ == "Character" and member.positive and not _folded(member)
            for member in members
        ):
            return tuple(int(member.value) for member in members)
    return ()


def _children(node: Any, regex_base: type) -> Iterator[Any]:
    for name in _CHILD_ATTRIBUTES:
        value = getattr(node, name, None)
        if isinstance(value, list):
            yield from (item for item in value if isinstance(item, regex_base))
        elif isinstance(value, regex_base):
            yield value


def _parsed(parser: _RegexParser, pattern: str, flags: int) -> Any:
    """``regex``'s parse tree of ``pattern``."""
    import regex

    global_flags = flags
    try:
        for _ in range(3):  # an inline global flag ((?x) mid-pattern) restarts the parse, as regex does
            source = parser.source(pattern)
            info = parser.info(global_flags, source.char_type, {})
            info.guess_encoding = regex.UNICODE
            source.ignore_space = bool(info.flags & regex.VERBOSE)
            try:
                tree = parser.parse_pattern(source, info)
            except parser.unscoped_flag_set:
                global_flags = info.global_flags
                continue
            if not source.at_end():
                raise PatternError(f"invalid regex {_shown(pattern)}: unbalanced parenthesis")
            return tree
    except RecursionError as exc:
        raise PatternError(f"regex {_shown(pattern)} nests deeper than {MAX_NESTING} levels") from exc
    except (regex.error, ValueError) as exc:
        if isinstance(exc, PatternError):
            raise
        raise PatternError(f"invalid regex {_shown(pattern)}: {exc}") from exc
    raise PatternError(f"invalid regex {_shown(pattern)}: its inline flags do not settle")


def _conservative_expansion(pattern: str) -> int:  # pragma: no cover - see _regex_parser
    """Without a parse tree: as if every counted repetition were nested in every other."""
    import regex

    product = 1
    for found in regex.finditer(r"\{(\d+)(?:,\d*)?\}", pattern):
        product *= max(1, int(found.group(1)))
        if product * len(pattern) > MAX_EXPANSION:
            raise PatternError(
                f"regex {_shown(pattern)} has counted repetitions that may unroll to more than "
                f"{MAX_EXPANSION:,} nodes when compiled; refused uncompiled"
            )
    return product * len(pattern)


class PatternBudget:
    """The CPU time one span's patterns may take together on its output, on the thread that checks it.

    Each search gets the per-pattern limit or what is left of the span's budget, whichever is less;
    once the budget is spent the remaining patterns are not run (their result is ``None``: not
    verified) and :attr:`check_errors` names ``pattern_budget``.
    """

    def __init__(self, total_s: float = PATTERN_BUDGET_S, per_pattern_s: float = REGEX_TIMEOUT_S) -> None:
        # The CPU time of the checking thread, not the wall clock: the budget bounds our own work. Behind
        # a busy app the worker can wait for the GIL longer than the whole budget between two patterns,
        # and a wall-clock budget then left a span's patterns unverified (measured: 1-2 spans in 20,000).
        self._total_s = total_s
        self._per_pattern_s = per_pattern_s
        self._deadline: float | None = None  # set by the first reading of the clock
        # Steps of the untimed searches since the clock was last read: the thread's CPU clock is a system
        # call (about 0.4 µs), read only once they add up to one timed search's worth.
        self._unclocked_steps = 0
        self._exhausted = False

    def search(self, pattern: regex.Pattern[str], text: str) -> bool | None:
        """True/False, or None when the pattern ran out of time or the budget was already spent."""
        if self._exhausted or self._total_s <= 0:
            self._exhaust()
            return None
        nodes = _LINEAR_NODE_COUNTS.get(id(pattern))
        steps = nodes * len(text) if nodes is not None else UNTIMED_STEPS + 1
        # concurrent=False (the fourth argument): ``regex`` would otherwise let go of the GIL for the search,
        # and getting it back behind a busy app thread takes up to the switch interval (5 ms) each time; the
        # timeout, which counts that wait, then expires on patterns that match in microseconds. By position:
        # ``regex`` matches keywords by name, a few thousand instructions a search.
        if steps <= UNTIMED_STEPS and self._unclocked_steps + steps <= UNTIMED_STEPS:
            # It cannot backtrack, and its steps (with those of the untimed searches before it) are bounded
            # well inside the timeout: no clock to read.
            self._unclocked_steps += steps
            return pattern.search(text, None, None, False) is not None
        remaining = self._remaining()
        if remaining <= 0:
            self._exhaust()
            return None
        if steps <= UNTIMED_STEPS:
            self._unclocked_steps = steps
            return pattern.search(text, None, None, False) is not None
        try:
            timeout = min(self._per_pattern_s, remaining)
            return pattern.search(text, timeout=timeout, concurrent=False) is not None
        except TimeoutError:
            count("checks.regex_timeout")
            if self._remaining() <= 0:
                self._exhaust()
            return None

    def _remaining(self) -> float:
        """Seconds of the budget left; the budget starts at the first reading."""
        now = time.thread_time()
        self._unclocked_steps = 0
        if self._deadline is None:
            self._deadline = now + self._total_s
        return self._deadline - now

    def _exhaust(self) -> None:
        if not self._exhausted:
            self._exhausted = True
            count("errors.check_budget")

    @property
    def exhausted(self) -> bool:
        """True when the span's patterns ran out of their shared time."""
        return self._exhausted

    @property
    def check_errors(self) -> tuple[str, ...]:
        """``("pattern_budget",)`` when the budget ran out, else empty."""
        return (PATTERN_BUDGET_ERROR,) if self._exhausted else ()
