"""Soak: many clients, crashes every round, stragglers, faulty clients; the books.

`quickstart` (FedAvg, MLP 512-128) on Fashion-MNIST with 1,000 clients for 20
rounds. Every round 10 % of the clients crash at random (back the round
after), 2 % straggle 50 times slower past a 5-simulated-second deadline (late),
and five faulty clients misbehave, one per behaviour: NaN, garbage bytes, a
wrong shape, a replay, a hang (ended by a 20 s wall-clock task timeout).

It prints the updates accepted, rejected, late and failed per round and checks
the books: every planned train task is accounted for exactly once (accepted +
rejected + late + failed == planned, and no client is in two of them). It
exits with status 1 if they do not balance; it never asserts on time.

    python bench/soak.py                          # 1,000 clients, 20 rounds
    python bench/soak.py --clients 200 --rounds 5
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from typing import Any

import clusterfed
from clusterfed.actors.clock import Deadline, WaitAll
from clusterfed.scenarios import Crash, Straggle, load_scenario, with_overrides
from clusterfed.scenarios.spec import Faulty

FLAGS = ("trained", "rejected", "late", "failed")


def scenario(args: argparse.Namespace) -> clusterfed.Scenario:
    base = with_overrides(
        load_scenario("quickstart"),
        [f"dataset.name={args.dataset}", "partition.min_samples=4"],
        clients=args.clients,
        rounds=args.rounds,
    )
    crash = max(1, round(args.crash_share * args.clients))
    slow = max(1, round(args.straggle_share * args.clients))
    step = max(1, args.clients // 6)
    faulty = [
        Faulty(clients=step * 1, behaviour="nan", start=1),
        Faulty(clients=step * 2, behaviour="garbage", start=2, every=2),
        Faulty(clients=step * 3, behaviour="wrong_shape", start=3, every=3),
        Faulty(clients=step * 4, behaviour="replay", start=2),
        Faulty(clients=step * 5, behaviour="hang", start=4, every=5),
    ]
    changes: dict[str, Any] = {
        "name": "soak",
        "events": [
            Crash(start=0, every=1, target=f"random:{crash}", recover_after=1),
            Straggle(start=0, every=1, target=f"random:{slow}", factor=50.0),
        ],
        "deadline": Deadline(seconds=args.deadline) if args.deadline > 0 else WaitAll(),
        "task_timeout_s": args.timeout,
        "faulty": faulty,
    }
    return clusterfed.Scenario(**{**dict(base), **changes})  # validated


def books(row: dict[str, Any]) -> tuple[dict[str, int], list[str]]:
    """The round's counts, and every way its books fail to balance."""
    counts = {flag: sum(c[flag] for c in row["clients"]) for flag in FLAGS}
    problems = []
    for client in row["clients"]:
        if sum(client[flag] for flag in FLAGS) > 1:
            problems.append(f"client {client['id']} is counted twice: {client}")
    planned = row["planned_updates"]
    if sum(counts.values()) != planned:
        problems.append(f"{counts} do not add up to the {planned} planned")
    if (
        counts["late"] != row["late_updates"]
        or counts["failed"] != row["failed_updates"]
    ):
        problems.append("the round's late/failed totals disagree with its clients")
    refused_updates = sum(1 for r in row["rejections"] if "describe:" not in r)
    if refused_updates < counts["rejected"]:
        problems.append(
            f"{counts['rejected']} updates rejected, {refused_updates} reasons"
        )
    return counts, problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--crash-share", type=float, default=0.10)
    parser.add_argument("--straggle-share", type=float, default=0.02)
    parser.add_argument(
        "--deadline", type=float, default=5.0, help="simulated s; 0: wait_all"
    )
    parser.add_argument("--timeout", type=float, default=20.0, help="task, wall s")
    parser.add_argument("--dataset", default="fashion_mnist")
    parser.add_argument("--workers", type=int)
    parser.add_argument("--runtime", default="local", choices=["local", "ray"])
    args = parser.parse_args()

    spec = scenario(args)
    print(
        f"soak: {spec.clients} clients, {spec.rounds} rounds, {args.dataset},"
        f" {args.runtime} runtime; per round {args.crash_share:.0%} crash,"
        f" {args.straggle_share:.0%} straggle ×50 (deadline {args.deadline} s);"
        f" faulty: " + ", ".join(f"{f.ids[0]} {f.behaviour}" for f in spec.faulty),
        flush=True,
    )
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        result = clusterfed.run(
            spec, out=out, runtime=args.runtime, workers=args.workers, progress=True
        )
    wall = time.perf_counter() - start

    print(
        f"{'round':>5} {'planned':>8} {'accepted':>9} {'rejected':>9} {'late':>6}"
        f" {'failed':>7} {'refusals':>9}  balanced"
    )
    totals: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    unbalanced = []
    for row in result.rows:
        counts, problems = books(row)
        totals.update(counts)
        totals["planned"] += row["planned_updates"]
        totals["refusals"] += row["rejected_messages"]
        for rejection in row["rejections"]:
            reasons[_kind(rejection)] += 1
        unbalanced += [f"round {row['round']}: {p}" for p in problems]
        print(
            f"{row['round']:>5} {row['planned_updates']:>8} {counts['trained']:>9}"
            f" {counts['rejected']:>9} {counts['late']:>6} {counts['failed']:>7}"
            f" {row['rejected_messages']:>9}  {'yes' if not problems else 'NO'}"
        )
    print(
        f"{'all':>5} {totals['planned']:>8} {totals['trained']:>9}"
        f" {totals['rejected']:>9} {totals['late']:>6} {totals['failed']:>7}"
        f" {totals['refusals']:>9}  {'yes' if not unbalanced else 'NO'}"
    )
    print("refusals by reason:")
    for reason, n in reasons.most_common():
        print(f"  {n:>4}  {reason}")
    s = result.summary
    print(
        f"final mean accuracy {s['final_mean_acc']:.4f} ± {s['final_std_acc']:.4f};"
        f" {wall:.0f} s wall, {wall / len(result.rows):.1f} s per round;"
        f" {s['sim_s']:.0f} simulated s"
    )
    for problem in unbalanced:
        print(f"UNBALANCED {problem}")
    print("books balance" if not unbalanced else "BOOKS DO NOT BALANCE")
    return 0 if not unbalanced else 1


def _kind(rejection: str) -> str:
    """A rejection's reason without who and which round."""
    reason = rejection.split(": ", 1)[-1]
    for known in (
        "contains NaN or Inf",
        "truncated or malformed message",
        "delta has shape",
        "which is over",
        "duplicate",
    ):
        if known in reason:
            return known
    return reason[:60]


if __name__ == "__main__":
    sys.exit(main())
