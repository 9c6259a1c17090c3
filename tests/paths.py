"""Where the tests find the repository and their fixtures, wherever in ``tests/`` a test file sits."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
"""The repository's root."""
FIXTURES = TESTS / "fixtures"
"""Small files the tests' authors wrote (never copies of the shared data)."""
