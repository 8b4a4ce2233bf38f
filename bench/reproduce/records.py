"""What a page needs of an experiment, kept in the repository.

Runs live in `--out` on the machine that ran them, and a paper-scale page
takes hours of runs: more than one sitting, and often more than one machine.
`save` writes the part of an outcome the page is made of to
`<records>/<dataset>/<key>.json.gz`: every seed's summary, every seed's rows
cut down to the fields the sections read (and the row's mean client
accuracy), and each client's accuracy in the first seed's rows (the
figures'). `load` gives it back as an `Outcome`, so a
page can be written from experiments run on other days, and it is the page
the runs themselves give. Gzip: the per-client accuracies of a paper-scale
page are megabytes of JSON.
"""

from __future__ import annotations

import gzip
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .runner import ROOT, Experiment, Outcome, make_outcome, mean_acc

# The row fields the sections and figures read (besides each client's id and
# accuracy); everything else in rounds.jsonl stays with the runs.
ROW_FIELDS = ("round", "ari", "purity", "n_clusters")
SUFFIX = ".json.gz"


def save(outcome: Outcome, records: Path) -> Path:
    path = records / outcome.dataset / f"{outcome.experiment.key}{SUFFIX}"
    path.parent.mkdir(parents=True, exist_ok=True)
    out = outcome.out
    record = {
        "key": outcome.experiment.key,
        "dataset": outcome.dataset,
        "command": outcome.experiment.command(
            outcome.quick, outcome.dataset, len(outcome.seeds)
        ),
        "quick": outcome.quick,
        "seconds": outcome.seconds,
        "out": str(out.relative_to(ROOT) if out.is_relative_to(ROOT) else out),
        "summaries": outcome.seed_summaries,
        "rows": {
            name: {
                seed: [_compact(r, seed == min(runs)) for r in rows]
                for seed, rows in runs.items()
            }
            for name, runs in outcome.seed_rows.items()
        },
    }
    # mtime=0: the same record gives the same bytes, so git sees no change.
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write(json.dumps(record, separators=(",", ":")).encode())
    return path


def load(
    records: Path,
    experiments: Iterable[Experiment],
    datasets: Sequence[str],
    quick: bool,
) -> list[Outcome]:
    """The recorded outcomes of `experiments` on `datasets`, made in the
    same mode (--quick or not); a record of an experiment that is no
    longer defined is skipped with a line on stderr."""
    known = {e.key: e for e in experiments}
    outcomes = []
    for dataset in datasets:
        for path in sorted((records / dataset).glob(f"*{SUFFIX}")):
            record = json.loads(gzip.decompress(path.read_bytes()))
            experiment = known.get(record["key"])
            if experiment is None:
                print(
                    f"{path}: no experiment {record['key']!r}; skipped", file=sys.stderr
                )
                continue
            if record["quick"] != quick:
                continue
            outcomes.append(
                make_outcome(
                    experiment,
                    dataset,
                    record["seconds"],
                    _by_seed(record["summaries"]),
                    _by_seed(record["rows"]),
                    ROOT / record["out"],
                    quick,
                )
            )
    return outcomes


def _compact(row: dict[str, Any], clients: bool) -> dict[str, Any]:
    kept = {f: row[f] for f in ROW_FIELDS if f in row}
    kept["mean_acc"] = mean_acc(row)
    if clients:
        kept["clients"] = [{"id": c["id"], "acc": c["acc"]} for c in row["clients"]]
    return kept


def _by_seed(by_name: dict[str, dict[str, Any]]) -> dict[str, dict[int, Any]]:
    # JSON keys are strings; seeds are ints everywhere else.
    return {
        name: {int(seed): value for seed, value in per_seed.items()}
        for name, per_seed in by_name.items()
    }
