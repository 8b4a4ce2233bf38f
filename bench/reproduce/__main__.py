"""`python -m reproduce` from bench/, the same as `python bench/reproduce.py`."""

from __future__ import annotations

from .cli import main

main()
