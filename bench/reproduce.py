"""Reproduce every paper experiment and write docs/REPRODUCTION.md.

Runs each built-in paper scenario with the algorithms its paper compares, on
the embedded digits (and on Fashion-MNIST where the Debian package's files are
present, unless --quick), then writes the page: for each paper its own table
(quoted from the paper) beside clusterfed's, the command and seed of every
run, and the figures. Every clusterfed number on the page comes from a run
this script performs.

    python bench/reproduce.py            # the papers' rounds (about an hour)
    python bench/reproduce.py --quick    # fewer rounds, digits only (< 10 min)
    python bench/reproduce.py --quick --datasets fashion_mnist   # paper scale
    python bench/reproduce.py --datasets fashion_mnist --only ocfl \
        --records docs/records --page docs/REPRODUCTION-fmnist.md

A paper-scale page takes hours of runs (bench/RESULTS.md), so it is built in
pieces: --records keeps what the page needs of each experiment in the
repository, and the page is written from every experiment recorded there,
whenever and wherever it ran (--no-run: from the records alone).

The work is in the package beside this script, bench/reproduce/: one module
per paper and shared ones for the runner, the page and the figures.
"""

from __future__ import annotations

# Run as a script, bench/ is first on sys.path, and a package folder wins over
# a module of the same name, so this imports bench/reproduce/, not this file.
from reproduce.cli import main

if __name__ == "__main__":
    main()
