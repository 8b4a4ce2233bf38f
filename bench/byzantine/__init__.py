"""The Byzantine benchmark behind bench/byzantine.py and docs/BYZANTINE.md.

Each cell of the table (an attack against a defence) is one `Experiment` of
the reproduce machinery (bench/reproduce/runner.py: a `clusterfed compare`
of FedAvg on the `byzantine-fmnist` scenario with `--set faulty=...` and
`--set aggregator=...`), recorded run by run (bench/reproduce/records.py).
The clustered section's experiments run cfl, ifca, dcfl and flhc under an
attack, and without one (its clean row); its FedAvg row is the table's cell
of that attack against `BEST_DEFENCE`, not a run of its own.

--quick runs a few cells on a smaller copy of the layout (20 clients, 4 of
them attackers, 3 rounds): it checks the machinery, not the figures.
"""

from __future__ import annotations

from reproduce.runner import Experiment

from clusterfed.actors.faults import FaultPlan

SCENARIO = "byzantine-fmnist"
DATASET = "fashion_mnist"
# Attacks, in the table's order ("none": the faulty clients behave).
ATTACKS = (
    "none",
    "sign_flip",
    "alie",
    "ipm",
    "minmax",
    "minsum",
    "fang",
    "mimic",
    "gaussian",
    "label_flip",
    "backdoor",
)
# Defences, in the table's order: name → how it is set. `{f}` is the number
# of attackers (the rules are told it, as FLANDERS tells its baselines) and
# `{m}` the honest clients (multi-Krum averages that many).
DEFENCES: dict[str, tuple[str, ...]] = {
    "mean": ("aggregator=mean",),
    "median": ("aggregator=median",),
    "trimmed_mean": ("aggregator=trimmed_mean", "aggregator.beta=0.2"),
    "krum": ("aggregator=krum", "aggregator.f={f}"),
    "multi_krum": ("aggregator=krum", "aggregator.f={f}", "aggregator.m={m}"),
    "geomed": ("aggregator=geomed",),
    "centered_clip": ("aggregator=centered_clip",),
    "bulyan": ("aggregator=bulyan", "aggregator.f={f}"),
    "dnc": ("aggregator=dnc", "aggregator.f={f}"),
    "signguard": ("aggregator=signguard",),
    "nnm+krum": ("aggregator=nnm+krum", "aggregator.f={f}", "aggregator.nnm_f={f}"),
    "bucketing+median": ("aggregator=bucketing+median",),
}
# FLANDERS' figures, Fashion-MNIST (Flower's baselines/flanders/README.md,
# "Accuracy w.r.t. number of attackers": screenshots of the accuracy_table of
# plotting/FLANDERS_results.ipynb; b = 20 attackers, b = 0 for "none"): the
# best centralised test accuracy over rounds 3 to 50 of one run, rounded to 2
# decimals; a maximum, not a final accuracy. (attack, defence) → that figure.
FLANDERS = {
    ("none", "mean"): 0.68,
    ("alie", "mean"): 0.17,
    ("alie", "median"): 0.65,
    ("alie", "trimmed_mean"): 0.54,
    ("alie", "multi_krum"): 0.65,
}
# The clustered section; "none" is its clean row: what clustering gives on
# Dirichlet 0.5 without an attacker, so the rows under attack show the cost
# of the attack, not clustering's personalisation.
CLUSTERED_ATTACKS = ("none", "alie", "ipm", "sign_flip")
CLUSTERED = ("cfl", "ifca", "dcfl", "flhc")
CLUSTERED_SETS = (
    "algorithm_params.ifca.clusters=2",
    "algorithm_params.cfl.thresholds=relative",
)
# FedAvg's partner in the clustered section: fixed (4cbcec9) before any cell
# of the table had run, so not picked from the results it is compared with.
BEST_DEFENCE = "median"
# The backdoor row's baseline: the backdoor's own trigger and target measured
# (`backdoor_probe`) on a clean run of the plain mean, the rate the trigger
# gets with no poisoning. Not a cell of the table; not in --quick.
TRIGGER_BASELINE = "none__mean__trigger"
# The full layout and --quick's smaller copy: clients, attackers, rounds.
FULL = (100, list(range(4, 100, 5)))
QUICK = (20, [4, 9, 14, 19])
QUICK_ROUNDS = 3
QUICK_CELLS = {
    ("none", "mean"),
    ("alie", "mean"),
    ("alie", "median"),
    ("ipm", "nnm+krum"),
}
QUICK_CLUSTERED = {"alie"}


def key(attack: str, defence: str) -> str:
    return f"{attack}__{defence}"


def _layout(quick: bool) -> list[str]:
    """--quick's smaller copy of the layout (the full one is the scenario's)."""
    if not quick:
        return []
    clients, attackers = QUICK
    return [f"clients={clients}", f"faulty.clients={attackers}"]


def _attack(attack: str) -> list[str]:
    if attack == "none":
        return ["faulty=[]"]
    sets = [f"faulty={attack}"]
    if attack == "gaussian":
        sets.append("faulty.sigma=0.05")  # an update's scale, not the bound's
    return sets


def _attackers(attack: str, quick: bool) -> list[str]:
    """The attack's sets and, in --quick, the smaller layout's attackers."""
    sets = [*_attack(attack), *_layout(quick)]
    if attack == "none":  # no attacker: _layout's ids have no entry
        return [s for s in sets if not s.startswith("faulty.")]
    return sets


def _defence(defence: str, quick: bool) -> list[str]:
    clients, attackers = QUICK if quick else FULL
    f, m = len(attackers), clients - len(attackers)
    return [s.format(f=f, m=m) for s in DEFENCES[defence]]


def experiments(quick: bool = False) -> list[Experiment]:
    """Every cell of the table, the backdoor's baseline, then the
    clustered section's experiments."""
    rounds = QUICK_ROUNDS
    found = []
    for attack in ATTACKS:
        for defence in DEFENCES:
            cell = (attack, defence) in QUICK_CELLS
            sets = [*_attackers(attack, quick), *_defence(defence, quick)]
            found.append(
                Experiment(
                    key=key(attack, defence),
                    scenario=SCENARIO,
                    algorithms=("fedavg",),
                    sets=tuple(sets),
                    quick_rounds=rounds if cell else None,
                )
            )
    backdoor = FaultPlan(behaviour="backdoor")
    found.append(
        Experiment(
            key=TRIGGER_BASELINE,
            scenario=SCENARIO,
            algorithms=("fedavg",),
            sets=(
                *_attackers("none", quick),
                *_defence("mean", quick),
                f"backdoor_probe.target={backdoor.target}",
                f"backdoor_probe.trigger={backdoor.trigger}",
            ),
        )
    )
    for attack in CLUSTERED_ATTACKS:
        cell = attack in QUICK_CLUSTERED
        base = _attackers(attack, quick)
        found.append(
            Experiment(
                key=f"clustered__{attack}",
                scenario=SCENARIO,
                algorithms=CLUSTERED,
                sets=(*base, *CLUSTERED_SETS),
                quick_rounds=rounds if cell else None,
            )
        )
    return found
