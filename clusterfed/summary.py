"""What a run's rows add up to: summary.json's numbers (DESIGN §8), the mean
client accuracy of a row, time to a target accuracy, the staleness of async
updates and CBCC's scores against the ground truth (CAFA)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score

from clusterfed.algorithms.cafa import CBCCRecord

Row = dict[str, Any]


def summarize(rows: Sequence[Row], *, algorithm: str, scenario: str) -> Row:
    """The summary of DESIGN §8 from the per-round rows."""
    means, stds = [], []
    for row in rows:
        accs = mean_std(row)
        if accs is not None:
            means.append(accs[0])
            stds.append(accs[1])
    last = rows[-1] if rows else None
    final = mean_std(last) if last else None
    spent = [r["epsilon_max"] for r in rows if r.get("epsilon_max") is not None]
    reached = [
        r["round"] + 1 for r in rows if r["purity"] is not None and r["purity"] >= 0.9
    ]
    return {
        "algorithm": algorithm,
        "scenario": scenario,
        "rounds": len(rows),
        "final_mean_acc": final[0] if final else None,
        "final_std_acc": final[1] if final else None,
        "avg_mean_acc": float(np.mean(means)) if means else None,
        "avg_std_acc": float(np.mean(stds)) if stds else None,
        "ari_final": last["ari"] if last else None,
        "purity_final": last["purity"] if last else None,
        "rounds_to_purity90": reached[0] if reached else None,
        "n_clusters_final": last["n_clusters"] if last else None,
        "global_acc_final": last.get("global_acc") if last else None,
        **(
            {"backdoor_success_final": last["backdoor_success"]}
            if last and "backdoor_success" in last
            else {}
        ),
        "epsilon_max": max(spent) if spent else None,
        "planned_updates": sum(r.get("planned_updates", 0) for r in rows),
        "late_updates": sum(r["late_updates"] for r in rows),
        "failed_updates": sum(r["failed_updates"] for r in rows),
        "rejected_messages": sum(r["rejected_messages"] for r in rows),
        "bytes_up": sum(r["bytes_up"] for r in rows),
        "bytes_down": sum(r["bytes_down"] for r in rows),
        "wall_s": last["wall_time"] if last else 0.0,
        "sim_s": last["sim_time"] if last else 0.0,
    }


def time_to_accuracy(rows: Sequence[Row], target: float) -> float | None:
    """Simulated seconds until the mean client accuracy first reached
    `target` (the row's sim_time); None if it never did."""
    for row in rows:
        accs = mean_std(row)
        if accs is not None and accs[0] >= target:
            return float(row["sim_time"])
    return None


def staleness_summary(rows: Sequence[Row]) -> Row | None:
    """The distribution of the staleness of the updates that arrived (async
    mode): mean, largest, and how many of each τ; None in synchronous runs."""
    taus = [
        c["staleness"]
        for r in rows
        for c in r["clients"]
        if c.get("staleness") is not None
    ]
    if not taus:
        return None
    values, counts = np.unique(taus, return_counts=True)
    return {
        "mean": float(np.mean(taus)),
        "max": int(max(taus)),
        "counts": {str(int(v)): int(n) for v, n in zip(values, counts, strict=True)},
    }


def cbcc_scores(cbcc: CBCCRecord, iid_truth: Mapping[int, bool] | None) -> Row:
    """How well CBCC (CAFA) tells IID clients from the rest (004 Tables II–III).

    `cbcc` is CAFA's last CBCC record: the clients CBCC placed and those it
    calls IID. `iid_truth` says, for each client, whether the scenario planted
    it IID (None: the partition does not say). IID is the positive class; the
    scores cover the clients CBCC placed that have a ground truth.
    """
    scores: Row = {
        "k": cbcc.k,
        "precision": None,
        "recall": None,
        "accuracy": None,
        "f1": None,
    }
    called = set(cbcc.iid_clients)
    placed = sorted(cbcc.clusters)
    if iid_truth is None:
        return scores
    judged = [c for c in placed if c in iid_truth]
    if not judged:
        return scores
    truth = [bool(iid_truth[c]) for c in judged]
    found = [c in called for c in judged]
    scores.update(
        precision=float(precision_score(truth, found, zero_division=0)),
        recall=float(recall_score(truth, found, zero_division=0)),
        accuracy=float(accuracy_score(truth, found)),
        f1=float(f1_score(truth, found, zero_division=0)),
        clients=len(judged),
        iid_true=sum(truth),
        iid_found=sum(found),
    )
    return scores


def mean_std(row: Row) -> tuple[float, float] | None:
    """Mean and standard deviation of the client accuracies of one round;
    a client the scenario made faulty does not count (its accuracy is its
    own report)."""
    accs = [
        c["acc"]
        for c in row["clients"]
        if c["acc"] is not None and not c.get("faulty", False)
    ]
    if not accs:
        return None
    return float(np.mean(accs)), float(np.std(accs))
