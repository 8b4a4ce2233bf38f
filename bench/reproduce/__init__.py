"""The paper reproductions behind bench/reproduce.py and docs/REPRODUCTION.md.

One module per paper holds what is that paper's: its experiments, its own
numbers quoted from it, and the section of the page with the verdict
sentences (DCFL's Fig. 5 in dcfl_fig5). The shared modules run the
experiments (runner), keep them in the repository (records), make each
verdict a claim that the page counts and adjusts (claims), write the page
(page) and draw the figures (figures); cli puts them together in the order
the page has always had.

    python bench/reproduce.py --quick    # from the repository root
    python -m reproduce --quick          # from bench/
"""

from __future__ import annotations

from . import baselines, cafa, dcfl, fedac, gradloss, ocfl
from .runner import Experiment

# The order is the run order and the page's order, so it stays the one the
# single-file script had: DCFL, OCFL, FedAC, gradloss, CAFA; then the
# clustered baselines' papers (issue 36).
PAPERS = (dcfl, ocfl, fedac, gradloss, cafa, baselines)

EXPERIMENTS: list[Experiment] = [e for paper in PAPERS for e in paper.EXPERIMENTS]
