"""The Byzantine benchmark: every attack against every defence on FLANDERS'
layout (Fashion-MNIST, 100 clients all sampled, 50 rounds, Dirichlet 0.5, an
MLP, 20 % attackers), 3 seeds, with FLANDERS' published figures (best
rounds) beside; and the clustered section (ALIE, IPM and sign flip against
cfl, ifca, dcfl, flhc and FedAvg with a defence: do the attackers end in a
cluster of their own? and the same algorithms without attackers).
Writes docs/BYZANTINE.md from the records in docs/records/byzantine, built
over sittings like bench/benchmark.py.

    python bench/byzantine.py --quick            # a smoke test, < 10 minutes
    python bench/byzantine.py --resume           # run what the records lack
    python bench/byzantine.py --only alie__median --seeds 1 --resume
    python bench/byzantine.py --no-run           # the page from the records

Needs Fashion-MNIST (apt-get install -y dataset-fashion-mnist). The work is
in the package beside this script, bench/byzantine/.
"""

from __future__ import annotations

# Run as a script, bench/ is first on sys.path, and a package folder wins over
# a module of the same name, so this imports bench/byzantine/, not this file.
from byzantine.cli import main

if __name__ == "__main__":
    main()
