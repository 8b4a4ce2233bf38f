"""The clustered-FL benchmark: every clustered algorithm, FedAvg and FedProx
on the same four Fashion-MNIST settings, 3 seeds each; writes
docs/BENCHMARK.md and its figures.

The settings are built-in scenarios (`clusterfed list`: bench-*-fmnist,
defined in scenarios/benchmark.py): planted rotations, label-skew groups,
Dirichlet(0.1) without planted groups, and concept drift. The whole
benchmark takes hours (the page's cost table), so it is built over sittings:
every setting's outcome is recorded run by run in docs/records/benchmark,
and the page is written from every record there.

    python bench/benchmark.py --quick            # every algorithm once, 3 rounds
    python bench/benchmark.py --resume           # run what the records lack
    python bench/benchmark.py --only drift --seeds 0 --resume
    python bench/benchmark.py --no-run           # the page from the records

Needs Fashion-MNIST (apt-get install -y dataset-fashion-mnist). The work is
in the package beside this script, bench/benchmark/.
"""

from __future__ import annotations

# Run as a script, bench/ is first on sys.path, and a package folder wins over
# a module of the same name, so this imports bench/benchmark/, not this file.
from benchmark.cli import main

if __name__ == "__main__":
    main()
