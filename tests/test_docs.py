"""The examples in docs/scenarios.md are real: each block validates."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clusterfed.scenarios import Scenario, validate

PAGE = Path(__file__).resolve().parent.parent / "docs" / "scenarios.md"
BLOCKS = re.findall(r"```(toml|python)\n(.*?)```", PAGE.read_text(), flags=re.S)
HEADER = 'name = "doc"\nclients = 10\nrounds = 30\n'


def test_the_page_has_examples_for_every_event() -> None:
    text = PAGE.read_text()
    for kind in ("join", "leave", "drift", "straggle", "crash", "dropout", "network"):
        assert f'kind = "{kind}"' in text
        assert f"from clusterfed.scenarios import {kind.capitalize()}" in text


@pytest.mark.parametrize(
    ("language", "code"), BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))]
)
def test_each_block_validates(language: str, code: str) -> None:
    import tomllib

    if language == "toml":
        scenario = validate(tomllib.loads(HEADER + code), source="docs/scenarios.md")
    else:
        namespace: dict = {}
        exec(code, namespace)
        scenario = Scenario(
            name="doc", clients=10, rounds=30, events=namespace["events"]
        )
    assert isinstance(scenario, Scenario)


README = PAGE.parent.parent / "README.md"


def test_the_readme_scenario_validates() -> None:
    import tomllib

    (block,) = re.findall(r"```toml\n(.*?)```", README.read_text(), flags=re.S)
    scenario = validate(tomllib.loads(block), source="README.md")
    assert [e.kind for e in scenario.events] == ["join", "drift", "straggle"]
