"""Reproduce every paper experiment and write docs/REPRODUCTION.md.

Runs each built-in paper scenario with the algorithms its paper compares, on
the embedded digits (and on Fashion-MNIST where the Debian package's files are
present, unless --quick), then writes the page: for each paper its own table
(quoted from the paper) beside clusterfed's, the command and seed of every
run, and the figures. Every clusterfed number on the page comes from a run
this script performs.

    python bench/reproduce.py            # the papers' rounds (about an hour)
    python bench/reproduce.py --quick    # fewer rounds, digits only (< 10 min)

The work is in the package beside this script, bench/reproduce/: one module
per paper and shared ones for the runner, the page and the figures.
"""

from __future__ import annotations

# Run as a script, bench/ is first on sys.path, and a package folder wins over
# a module of the same name, so this imports bench/reproduce/, not this file.
from reproduce.cli import main

if __name__ == "__main__":
    main()
