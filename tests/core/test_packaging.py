"""What the distribution declares, read by the build backend itself (hatchling), as a wheel gets it."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_openai_agents_extra_is_the_agents_extra() -> None:
    """``pip install 'tallyspan[openai-agents]'``, the library's own name, is what people try first."""
    from hatchling.metadata.core import ProjectMetadata

    extras = ProjectMetadata(str(ROOT), None).core.optional_dependencies
    assert extras["openai-agents"] == extras["agents"] == ["openai-agents>=0.24"]
