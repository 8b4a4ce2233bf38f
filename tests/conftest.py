"""Shared fixtures."""

from __future__ import annotations

import pytest

from clusterfed.scenarios import Scenario
from helpers import small_scenario


@pytest.fixture
def scenario() -> Scenario:
    return small_scenario()
