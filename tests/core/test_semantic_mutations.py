"""The list of semantic mutations stays applicable: a refactor that moves or rewrites the code a mutation
edits must update the mutation, or the bug it stands for is no longer tried (the runner refuses to start)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "semantic_mutations.py"


def test_every_semantic_mutation_edits_text_found_exactly_once() -> None:
    module = runpy.run_path(str(SCRIPT), run_name="semantic_mutations")
    mutations = module["MUTATIONS"]
    assert mutations
    problems = [problem for mutation in mutations if (problem := module["_misplaced"](mutation)) is not None]
    assert problems == []
    names = [mutation.name for mutation in mutations]
    assert len(names) == len(set(names)), "two mutations share a name"
    for mutation in mutations:
        for _file, old, new in mutation.edits:
            assert old != new, mutation.name
        for argument in mutation.tests:
            if argument.startswith("tests/"):
                path = ROOT / argument.split("::", 1)[0]
                if not path.exists():
                    pytest.fail(f"{mutation.name}: {argument} does not exist")
