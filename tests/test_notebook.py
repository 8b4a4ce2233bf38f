"""examples/quickstart.ipynb runs from top to bottom (issue 39): executed
here by nbclient in a kernel of this interpreter, so it cannot rot."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nbclient
import nbformat

import clusterfed
from helpers import small_scenario

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "quickstart.ipynb"


def test_the_quickstart_notebook_runs_and_shows_what_it_says(tmp_path: Path) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # Committed without outputs: what a reader sees first is the code.
    assert all(not c.get("outputs") for c in notebook.cells if c.cell_type == "code")
    nbclient.NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()
    text = "\n".join(
        output.get("text", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )
    runs = tmp_path / "runs" / "notebook"
    summary = json.loads((runs / "quickstart" / "summary.json").read_text())
    assert f"final mean accuracy {summary['final_mean_acc']:.3f} over 5" in text
    assert "fedavg   final accuracy" in text and "over 2 seeds" in text
    assert (runs / "compare" / "seeds.json").exists()
    median = json.loads((runs / "median" / "config.json").read_text())
    assert median["scenario"]["algorithm"] == "notebook-median"
    # The plot cell drew a figure and showed the rounds' table.
    shown = [
        output
        for output in notebook.cells[7].outputs
        if output.output_type in ("display_data", "execute_result")
    ]
    assert any("image/png" in output["data"] for output in shown)
    assert any("text/html" in output["data"] for output in shown)


def test_a_run_from_inside_a_running_event_loop_finishes(tmp_path: Path) -> None:
    # As in a Jupyter kernel, whose cells run inside its event loop.
    async def cell() -> int:
        return len(clusterfed.run(small_scenario(rounds=2), out=tmp_path).rows)

    assert asyncio.run(cell()) == 2
