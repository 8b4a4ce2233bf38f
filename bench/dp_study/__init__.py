"""The DP utility study of issue 35 on DCFL's Table I setting
(`dcfl-fmnist`: ε = 10, δ = 1e-5), behind bench/dp_study.py.

DCFL's paper gives ε, δ and "norm clipping", not the batch size, the
clipping bound or what ε covers; before the study the scenario chose batch
16, C = 1 and the whole run. DP-SGD's noise on a mean gradient falls as
1/batch, so batch 16 is the worst case an Opacus user would pick. The
scenario now runs the study's choice (its description says which and why).
The study runs every batch ×
bound × horizon with DCFL, and DP-FedAvg (client-level DP,
`dp.mechanism = "client"`) at every update bound, fixed and adaptive, with
FedAvg: one seed each first (the screen, by the method under study alone),
then 3 seeds for the best two of each kind and for the local cell whose DCFL
is nearest the paper's, each with the rest of its table beside it (CFL and
FedAvg; IFCA), whose better is the default (the rule and its measure:
selection.py). CFL and FedAvg run only where the question is asked of them
(does the paper's ordering hold at the chosen settings?): the screen is 24
runs where one seed of every cell's whole table was 66, each of them 60 DP
rounds of dcfl-fmnist.
"""

from __future__ import annotations

from reproduce.dcfl import TABLE1
from reproduce.runner import Experiment

SCENARIO = "dcfl-fmnist"
ALGORITHMS = ("dcfl", "cfl", "fedavg")
# DP-FedAvg adds its noise to each cluster's sum: of the paper's three only
# FedAvg aggregates that way (DCFL and CFL are refused at validation), so
# IFCA stands in as the clustered algorithm.
CLIENT_ALGORITHMS = ("fedavg", "ifca")
BATCHES = (16, 64, 256)
BOUNDS = (0.1, 1.0, 10.0)
HORIZONS = ("run", "round")
CLIPPINGS = ("fixed", "adaptive")
# DCFL's Table I, final accuracy with DP: the reproduction's own quote.
PAPER_FINAL = {a: TABLE1[a][0] for a in ALGORITHMS}
QUICK_ROUNDS = 2
# dcfl-fmnist's values, before the study chose its defaults, of the fields
# that the other kind of cell varies: pinned, so that every cell stays what
# it was run as (and its records stand) when the scenario's defaults move.
SAMPLE_PINS = ("dp.clip_norm=1",)
CLIENT_PINS = ("train.batch_size=16", "dp.max_grad_norm=1", "dp.horizon=run")


def sample_key(batch: int, bound: float, horizon: str) -> str:
    return f"sample-b{batch}-c{bound:g}-{horizon}"


def client_key(bound: float, clipping: str) -> str:
    return f"client-c{bound:g}-{clipping}"


def companion_key(key: str) -> str:
    """The experiment that runs the rest of cell `key`'s table (its
    algorithms after the first, which the cell's own experiment screens)."""
    others = ALGORITHMS[1:] if key.startswith("sample-") else CLIENT_ALGORITHMS[1:]
    return "-".join((key, *others))


def _cell(
    key: str, sets: tuple[str, ...], algorithms: tuple[str, ...]
) -> list[Experiment]:
    """A cell's screen (its first algorithm) and its companion (the rest;
    not part of --quick)."""
    return [
        Experiment(
            key=key,
            scenario=SCENARIO,
            algorithms=algorithms[:1],
            sets=sets,
            quick_rounds=QUICK_ROUNDS,
            quick_algorithms=("fedavg",),
        ),
        Experiment(
            key=companion_key(key),
            scenario=SCENARIO,
            algorithms=algorithms[1:],
            sets=sets,
        ),
    ]


def experiments() -> list[Experiment]:
    """Every cell of the study, its screen then its companion: local
    DP-SGD's, then DP-FedAvg's."""
    found = [
        experiment
        for batch in BATCHES
        for bound in BOUNDS
        for horizon in HORIZONS
        for experiment in _cell(
            sample_key(batch, bound, horizon),
            (
                f"train.batch_size={batch}",
                f"dp.max_grad_norm={bound:g}",
                f"dp.horizon={horizon}",
                *SAMPLE_PINS,
            ),
            ALGORITHMS,
        )
    ]
    found += [
        experiment
        for bound in BOUNDS
        for clipping in CLIPPINGS
        for experiment in _cell(
            client_key(bound, clipping),
            (
                "dp.mechanism=client",
                f"dp.clip_norm={bound:g}",
                f"dp.clipping={clipping}",
                *CLIENT_PINS,
            ),
            CLIENT_ALGORITHMS,
        )
    ]
    return found


def screens() -> list[Experiment]:
    """The cells' own experiments, one per cell, in the study's order: what
    a sitting runs unless --only names others."""
    every = experiments()
    companions = {companion_key(e.key) for e in every}
    return [e for e in every if e.key not in companions]
