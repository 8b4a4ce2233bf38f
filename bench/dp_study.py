"""The DP utility study of issue 35: DCFL's Table I setting (`dcfl-fmnist`,
ε = 10, δ = 1e-5) at batch 16 / 64 / 256 × clipping bound 0.1 / 1 / 10 ×
ε over the run / each round, and DP-FedAvg at update bound 0.1 / 1 / 10,
fixed and adaptive; writes docs/DP-STUDY.md.

Hours of runs (a DP round of dcfl-fmnist is seconds, 60 rounds a run), so it
is built over sittings: every cell's outcome is recorded run by run in
docs/records/dp-study, and the page is written from every record there. One
seed of every cell's screen first (DCFL; DP-FedAvg's: FedAvg); the page then
names the best two of each kind and the local cell nearest the paper, and
the command that runs their 3 seeds with the rest of their tables (CFL and
FedAvg; IFCA), and, once run, the default (bench/dp_study/selection.py).

    python bench/dp_study.py --quick              # every cell, FedAvg, 2 rounds
    python bench/dp_study.py --resume --seeds 1   # one seed of every screen
    python bench/dp_study.py --only sample-b64-c1-run \
        sample-b64-c1-run-cfl-fedavg --seeds 3 --resume
    python bench/dp_study.py --no-run             # the page from the records

Needs Fashion-MNIST (apt-get install -y dataset-fashion-mnist). The work is
in the package beside this script, bench/dp_study/.
"""

from __future__ import annotations

# Run as a script, bench/ is first on sys.path, and a package folder wins over
# a module of the same name, so this imports bench/dp_study/, not this file.
from dp_study.cli import main

if __name__ == "__main__":
    main()
