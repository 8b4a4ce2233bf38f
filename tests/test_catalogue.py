"""`clusterfed list` reads the catalogue from the sources, without torch, and
agrees with the imported tables (issue 20)."""

from __future__ import annotations

import subprocess
import sys

from clusterfed import __version__, catalogue
from clusterfed.algorithms import algorithms, parameters
from clusterfed.data import DATASETS
from clusterfed.data.synthetic import LISTED, SyntheticParams, parse_name
from clusterfed.models import MODELS
from clusterfed.scenarios import BUILTIN


def test_the_catalogue_agrees_with_the_imported_tables() -> None:
    assert catalogue.scenarios() == {
        name: (build.__doc__ or "").strip().splitlines()[0]
        for name, build in BUILTIN.items()
    }
    assert catalogue.datasets() == {**dict.fromkeys(DATASETS, ""), **LISTED}
    assert catalogue.models() == list(MODELS)
    assert catalogue.algorithms() == {
        name: {k: repr(v) for k, v in parameters(name).items()} for name in algorithms()
    }


def test_the_listed_synthetic_names_are_names_it_takes() -> None:
    parsed = {
        name: parse_name(name.replace("<alpha>_<beta>", "0.5_0.25")) for name in LISTED
    }
    assert parsed["synthetic"] == SyntheticParams(alpha=1.0, beta=1.0)
    assert parsed["synthetic_<alpha>_<beta>"] == SyntheticParams(alpha=0.5, beta=0.25)
    assert parsed["synthetic_iid"] is not None and parsed["synthetic_iid"].iid


def test_list_and_version_import_no_torch() -> None:
    code = (
        "import sys; from clusterfed.cli import main; main(['list']);"
        " print('torch' in sys.modules, 'sklearn' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "quickstart" in done.stdout and "fedprox" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "False False"
    version = subprocess.run(
        [sys.executable, "-m", "clusterfed.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert version.stdout.strip() == f"clusterfed {__version__}"
