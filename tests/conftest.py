"""Shared test fixtures: where the real traces live, and skipping when they don't."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = ROOT.parent / "shared" / "fixtures"


@pytest.fixture(scope="session")
def shared_fixtures() -> Path:
    """The real traces in ../shared/fixtures; tests that need them skip when absent."""
    if not SHARED_FIXTURES.is_dir():
        pytest.skip(f"real trace fixtures not found at {SHARED_FIXTURES} (see its README)")
    return SHARED_FIXTURES
