"""The docs are real: the scenario examples validate, the README opens with the
quick start, and every relative link reaches its file and heading."""

from __future__ import annotations

import re
from collections import Counter
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


ROOT = PAGE.parent.parent
README = ROOT / "README.md"
SCENARIO_PAGE = ROOT / "docs" / "writing-a-scenario.md"
MARKDOWN = [README, *sorted((ROOT / "docs").glob("*.md"))]


def test_the_scenario_page_example_validates() -> None:
    import tomllib

    (block,) = re.findall(r"```toml\n(.*?)```", SCENARIO_PAGE.read_text(), flags=re.S)
    scenario = validate(tomllib.loads(block), source=str(SCENARIO_PAGE))
    assert [e.kind for e in scenario.events] == ["join", "drift", "straggle"]


QUICK_START = (
    'python3 -m venv .venv && .venv/bin/pip install -e ".[test]"'
    " && .venv/bin/clusterfed run quickstart\n"
    ".venv/bin/pytest -q\n"
)


def test_the_readme_opens_with_the_two_quick_start_commands() -> None:
    import tomllib

    from clusterfed.scenarios import BUILTIN

    text = README.read_text()
    start = text.index("## Quick start")
    # Near the top: a reader should not scroll past a screen to install.
    assert text[:start].count("\n") < 30
    block = re.search(r"```bash\n(.*?)```", text[start:], flags=re.S)
    assert block is not None and block.group(1) == QUICK_START
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "test" in project["optional-dependencies"]
    assert "clusterfed" in project["scripts"]
    assert "quickstart" in BUILTIN


def _without_fences(page: Path) -> str:
    # Inside a fenced block `#` and `](` are code, not headings or links.
    return re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)


def _anchors(page: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens,
    a repeated id suffixed -1, -2, …"""
    anchors: set[str] = set()
    seen: Counter[str] = Counter()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", _without_fences(page), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchors.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return anchors


def _links(page: Path) -> list[str]:
    prose = re.sub(r"`[^`\n]*`", "", _without_fences(page))
    targets = re.findall(r"\]\(([^)\s]+)\)", prose)
    return [t for t in targets if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", MARKDOWN, ids=[p.name for p in MARKDOWN])
def test_every_relative_link_reaches_a_file_and_heading(page: Path) -> None:
    broken = []
    for link in _links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.is_file():
            broken.append(f"{link}: no file {target}")
        elif anchor and anchor not in _anchors(target):
            broken.append(f"{link}: no heading #{anchor} in {target.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_the_readme_links_every_docs_page() -> None:
    linked = {
        (README.parent / link.partition("#")[0]).resolve() for link in _links(README)
    }
    orphans = [p.name for p in MARKDOWN[1:] if p.resolve() not in linked]
    assert not orphans, f"docs pages the README does not link: {orphans}"
