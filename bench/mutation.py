"""Mutation testing with mutmut, on a copy of the tree (never on the sources).

mutmut names a mutant after the file's path, and the tests import the code as
``clusterfed.algorithms.fedavg`` while the file is ``algorithms/fedavg.py``
(pyproject's package-dir). So this script lays the packages out as
``clusterfed/<package>/`` in ``mutants/<group>/`` (git-ignored), copies the tests,
examples and pyproject there with ``[tool.mutmut]`` narrowed to the group, and runs
mutmut in that folder: the working tree is only read.

    .venv/bin/python bench/mutation.py            # every group (hours on 2 cores)
    .venv/bin/python bench/mutation.py validation privacy aggregate dcfl distances
    .venv/bin/python bench/mutation.py --list     # the groups, their modules and tests
    .venv/bin/python bench/mutation.py dcfl -- "clusterfed.algorithms.dcfl.x_*"

Results stay in ``mutants/<group>/mutants/`` (rerun to retest only what changed;
``--fresh`` starts again); the script prints killed / total per module. Out of CI.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["actors", "algorithms", "scenarios", "protocol", "data", "models"]
# group -> (modules to mutate, relative to the repository; test files that judge them)
GROUPS: dict[str, tuple[list[str], list[str]]] = {
    "validation": (
        ["actors/validation.py"],
        [
            "test_hostile.py",
            "test_byzantine_rows.py",
            "test_protocol.py",
            "test_server.py",
            "test_checkpoint.py",  # check_snapshot
            "test_validation.py",  # each check alone, at its edges
        ],
    ),
    "privacy": (["actors/privacy.py"], ["test_dp.py", "test_trainer.py"]),
    "trainer": (
        ["actors/trainer.py", "actors/proximal.py"],
        ["test_dp.py", "test_trainer.py"],
    ),
    "aggregate": (
        ["algorithms/fedavg.py", "algorithms/_aggregate.py"],
        [
            "test_fedavg.py",
            "test_strategy_conformance.py",
            "test_fedprox.py",
            "test_streaming.py",
        ],
    ),
    "dcfl": (
        ["algorithms/dcfl.py"],
        ["test_dcfl.py", "test_dcfl_edges.py", "test_strategy_conformance.py"],
    ),
    "distances": (["algorithms/distances.py"], ["test_distances.py", "test_dcfl.py"]),
    # the rest of algorithms/ and scenarios/ in groups one person can work through;
    # "algorithms" and "scenarios" below are their unions
    "cfl": (["algorithms/cfl.py"], ["test_cfl.py", "test_strategy_conformance.py"]),
    "identity": (
        ["algorithms/ifca.py", "algorithms/gradloss.py"],
        # test_async_clusters: IFCA's asynchronous mode (absorb, plan_for)
        [
            "test_identity.py",
            "test_async_clusters.py",
            "test_strategy_conformance.py",
            "test_streaming.py",
        ],
    ),
    "async": (
        [
            "algorithms/fedasync.py",
            "algorithms/fedbuff.py",
            "algorithms/_buffers.py",
            "algorithms/_staleness.py",
        ],
        ["test_async.py", "test_async_clusters.py", "test_strategy_conformance.py"],
    ),
    "ocfl": (["algorithms/ocfl.py"], ["test_ocfl.py", "test_strategy_conformance.py"]),
    "fedac": (
        ["algorithms/fedac.py"],
        ["test_fedac.py", "test_strategy_conformance.py"],
    ),
    "cafa": (["algorithms/cafa.py"], ["test_cafa.py", "test_strategy_conformance.py"]),
    # issue 36's clustered baselines, each with its own tests and the suite
    "flhc": (["algorithms/flhc.py"], ["test_flhc.py", "test_strategy_conformance.py"]),
    "fesem": (
        ["algorithms/fesem.py"],
        ["test_fesem.py", "test_strategy_conformance.py"],
    ),
    "pacfl": (
        ["algorithms/pacfl.py", "algorithms/_subspace.py"],
        ["test_pacfl.py", "test_strategy_conformance.py"],
    ),
    "fedsoft": (
        ["algorithms/fedsoft.py", "algorithms/fedsoft_client.py"],
        ["test_fedsoft.py", "test_strategy_conformance.py"],
    ),
    "fedem": (
        [
            "algorithms/fedem.py",
            "algorithms/fedem_client.py",
            "algorithms/policy.py",
            "actors/mixture.py",
        ],
        ["test_fedem.py", "test_identity.py", "test_strategy_conformance.py"],
    ),
    "base": (
        [
            "algorithms/robust.py",
            "algorithms/fedprox.py",
            "algorithms/base.py",
            "algorithms/registry.py",
        ],
        [
            "test_byzantine.py",
            "test_fedprox.py",
            "test_plugin_algorithm.py",
            "test_strategy_conformance.py",
            "test_strategy_base.py",  # ServerState and Strategy defaults alone
            "test_registry.py",  # every refusal whole, module paths, entry points
            "test_streaming.py",  # folds, streams and the fold hooks' defaults
        ],
    ),
    "timeline": (
        [
            "scenarios/engine.py",
            "scenarios/events.py",
            "scenarios/timeline.py",
            "scenarios/transforms.py",
        ],
        [
            "test_events.py",
            "test_scenarios.py",
            "test_data.py",
            "test_timeline.py",  # events and the timeline alone
            "test_transforms.py",  # group transforms alone
            "test_engine.py",  # the engine on a recording membership
        ],
    ),
    "specs": (
        [
            f"scenarios/{name}"
            for name in (
                "__init__.py",
                "build.py",
                "builtin.py",
                "capabilities.py",
                "dealing.py",
                "loader.py",
                "papers.py",
                "papers_fmnist.py",
                "problems.py",
                "spec.py",
            )
        ],
        # not test_events.py nor test_cli's runs: whole federations of 3-10 s each
        # that judge the engine and the command line, while a survivor here runs
        # every test that reaches it (hours on the shared 2 cores); nor
        # test_the_console_script_is_installed, whose subprocess imports the
        # working tree through the editable install, never the mutant
        [
            "test_scenarios.py",
            "test_problems.py",
            "test_spec.py",
            "test_papers.py",
            "test_scenario_build.py",
            "test_cli.py::test_list_shows_scenarios_algorithms_datasets_models",
            "test_cli.py::test_a_bad_scenario_exits_2_naming_file_and_field",
        ],
    ),
}


def _union(groups: list[str]) -> tuple[list[str], list[str]]:
    """The modules and the test files of several groups, each once."""
    modules = [m for g in groups for m in GROUPS[g][0]]
    tests = [t for g in groups for t in GROUPS[g][1]]
    return sorted(set(modules)), list(dict.fromkeys(tests))


# the whole of algorithms/ and of scenarios/ (hours on 2 cores)
GROUPS["algorithms"] = _union(
    ["aggregate", "dcfl", "distances", "cfl", "identity", "async"]
    + ["ocfl", "fedac", "cafa", "base"]
)
GROUPS["scenarios"] = _union(["timeline", "specs"])


def stage(group: str, *, fresh: bool, pytest_args: list[str]) -> Path:
    """Lay out ``mutants/<group>/`` as an installed clusterfed would look."""
    where = ROOT / "mutants" / group
    if fresh and where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True, exist_ok=True)
    for name in ("clusterfed", "tests", "examples"):
        if (where / name).exists():
            shutil.rmtree(where / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    # copy2 keeps mtimes: mutmut reuses a result while the file's mtime is unchanged
    shutil.copytree(ROOT / "clusterfed", where / "clusterfed", ignore=ignore)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, where / "clusterfed" / package, ignore=ignore)
    shutil.copytree(ROOT / "tests", where / "tests", ignore=ignore)
    shutil.copytree(ROOT / "examples", where / "examples", ignore=ignore)
    modules, tests = GROUPS[group]
    text = (ROOT / "pyproject.toml").read_text()
    table = re.search(r"^\[tool\.mutmut\]\n(?:(?!^\[).*\n?)*", text, re.M)
    if table is None:
        raise SystemExit("pyproject.toml has no [tool.mutmut] table")
    narrowed = table.group(0)
    add = re.search(r"^pytest_add_cli_args = (\[[^\]]*\])", narrowed, re.M)
    for key, value in (
        ("only_mutate", [f"clusterfed/{m}" for m in modules]),
        (
            "pytest_add_cli_args",
            (json.loads(add.group(1)) if add else []) + pytest_args,
        ),
        ("pytest_add_cli_args_test_selection", [f"tests/{t}" for t in tests]),
        # the tests run in mutants/<group>/mutants/, and some read examples/
        ("also_copy", ["examples"]),
    ):
        line = f"{key} = {json.dumps(value)}"
        narrowed, n = re.subn(rf"^{key} = \[[^\]]*\]", line, narrowed, flags=re.M)
        if n == 0:
            narrowed = narrowed.rstrip("\n") + f"\n{line}\n"
    (where / "pyproject.toml").write_text(text.replace(table.group(0), narrowed + "\n"))
    return where


def scores(where: Path) -> dict[str, dict[str, int]]:
    """killed, survived, ... per module, from mutmut's own meta files."""
    from mutmut.stats import status_by_exit_code

    out: dict[str, dict[str, int]] = {}
    for meta in sorted((where / "mutants" / "clusterfed").rglob("*.py.meta")):
        data = json.loads(meta.read_text())
        module = str(meta.relative_to(where / "mutants"))[: -len(".meta")]
        counts: dict[str, int] = {}
        for code in data["exit_code_by_key"].values():
            status = status_by_exit_code[code]
            counts[status] = counts.get(status, 0) + 1
        out[module] = counts
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("groups", nargs="*", help=f"of {', '.join(GROUPS)}")
    parser.add_argument("--list", action="store_true", help="show the groups")
    parser.add_argument("--fresh", action="store_true", help="drop earlier results")
    parser.add_argument("--max-children", type=int, default=2)
    parser.add_argument(
        "--pytest", default="", help='more pytest arguments, e.g. "--deselect ID"'
    )
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args, mutants = parser.parse_args(argv[:split]), argv[split + 1 :]
    if args.list:
        for name, (modules, tests) in GROUPS.items():
            print(f"{name}: {' '.join(modules)}\n    tests: {' '.join(tests)}")
        return
    unknown = sorted(set(args.groups) - set(GROUPS))
    if unknown:
        raise SystemExit(f"unknown group(s) {unknown}; known: {', '.join(GROUPS)}")
    mutmut = Path(sys.executable).with_name("mutmut")
    env = os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    for group in args.groups or list(GROUPS):
        where = stage(group, fresh=args.fresh, pytest_args=args.pytest.split())
        started = time.monotonic()
        command = [str(mutmut), "run", "--max-children", str(args.max_children)]
        subprocess.run([*command, *mutants], cwd=where, env=env, check=False)
        took = time.monotonic() - started
        print(f"\n== {group}: {took / 60:.1f} min")
        for module, counts in scores(where).items():
            killed = counts.get("killed", 0) + counts.get("timeout", 0)
            total = sum(counts.values())
            print(f"{module}: {killed}/{total} killed  {counts}")
        survivors = subprocess.run(
            [str(mutmut), "results"], cwd=where, capture_output=True, text=True
        ).stdout
        print(survivors)


if __name__ == "__main__":
    main()
