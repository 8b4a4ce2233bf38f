"""Per-client test sets drawn from a dataset's own test split (issue 34).

Most tests give the digits a stand-in "test split" (the digits themselves) so
they run where Fashion-MNIST is not installed; the last one uses the real
split where it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from clusterfed.actors import ClientSpec
from clusterfed.actors.outcome import ClientOutcome
from clusterfed.actors.spec import build_trainer, rotate
from clusterfed.data import class_shares, datasets, draw_test_set
from clusterfed.data.test_sets import class_counts
from clusterfed.errors import ConfigError
from clusterfed.protocol import EvaluateReply
from clusterfed.scenarios import (
    Drift,
    PermutationTransform,
    RotationTransform,
    ScenarioEngine,
    ShardsPartition,
    plan_run,
)
from clusterfed.types import ClientId
from helpers import read_rounds, small_scenario


@pytest.fixture
def digits_with_a_test_split(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The digits, given a test split (the digits again): a small synthetic
    stand-in for Fashion-MNIST's, present on every machine."""
    monkeypatch.setattr(
        datasets, "WITH_TEST_SPLIT", datasets.WITH_TEST_SPLIT | {"digits"}
    )
    datasets.load_test_split.cache_clear()
    yield
    datasets.load_test_split.cache_clear()


class _Members:
    """A membership that only keeps the updated specs."""

    def __init__(self) -> None:
        self.updated: list[ClientSpec] = []

    async def add_clients(self, specs: Any) -> None:
        pass

    async def remove_client(self, client: int, reason: str) -> None:
        pass

    async def update_client(self, spec: ClientSpec) -> None:
        self.updated.append(spec)

    def set_unreachable(self, clients: dict[int, str]) -> None:
        pass


def _test_labels() -> np.ndarray:
    split = datasets.load_test_split("digits")
    assert split is not None
    return split.labels


def test_class_counts_split_the_size_by_largest_remainder() -> None:
    assert class_counts(np.array([1.0, 1.0, 1.0]), 10).tolist() == [4, 3, 3]
    assert class_counts(np.array([0.0, 3.0, 1.0]), 8).tolist() == [0, 6, 2]
    with pytest.raises(ConfigError, match="not all 0"):
        class_counts(np.zeros(3), 5)
    with pytest.raises(ConfigError, match="size 0"):
        class_counts(np.ones(3), 0)


def test_a_drawn_test_set_holds_the_shares_and_only_those_classes() -> None:
    labels = np.repeat(np.arange(4), 50)
    rng = np.random.default_rng(0)
    drawn = draw_test_set(labels, np.array([0.0, 0.25, 0.75, 0.0]), 40, rng)
    assert drawn.tolist() == sorted(drawn.tolist())
    assert np.bincount(labels[drawn], minlength=4).tolist() == [0, 10, 30, 0]
    assert len(set(drawn.tolist())) == 40  # no repeats while the split has enough
    # Past a class's images it draws with replacement rather than fail.
    big = draw_test_set(labels, np.array([1.0, 0, 0, 0]), 80, rng)
    assert len(big) == 80 and set(labels[big].tolist()) == {0}
    with pytest.raises(ConfigError, match="class 3 has no image"):
        draw_test_set(labels[labels < 3], np.array([0, 0, 0, 1.0]), 5, rng)


@pytest.mark.usefixtures("digits_with_a_test_split")
def test_a_label_skewed_clients_test_labels_follow_its_proportions() -> None:
    plan = plan_run(small_scenario(partition=ShardsPartition(labels_per_client=2)))
    labels, n_classes = plan.dataset.labels, plan.dataset.n_classes
    test_labels = _test_labels()
    for spec in plan.clients:
        assert spec.test_set is not None
        # Its size is its hold-out's; its classes are its training classes.
        assert len(spec.test_set) == len(spec.test)
        shares = class_shares(labels[spec.train], n_classes)
        counts = np.bincount(test_labels[spec.test_set], minlength=n_classes)
        assert counts.tolist() == class_counts(shares, len(spec.test)).tolist()
        assert set(np.flatnonzero(counts)) <= set(np.flatnonzero(shares))


@pytest.mark.usefixtures("digits_with_a_test_split")
def test_test_sets_come_from_the_seed_and_their_own_stream() -> None:
    first, again = plan_run(small_scenario()), plan_run(small_scenario())
    other = plan_run(small_scenario(seed=1))
    assert [c.test_set for c in first.clients] == [c.test_set for c in again.clients]
    assert [c.test_set for c in first.clients] != [c.test_set for c in other.clients]
    # Drawing them moves no other stream: the samples are today's.
    datasets.load_test_split.cache_clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(datasets, "WITH_TEST_SPLIT", frozenset())
        plain = plan_run(small_scenario())
    assert [(c.train, c.test, c.seed) for c in plain.clients] == [
        (c.train, c.test, c.seed) for c in first.clients
    ]


@pytest.mark.usefixtures("digits_with_a_test_split")
def test_a_rotated_clients_test_images_are_rotated() -> None:
    plan = plan_run(small_scenario(transform=RotationTransform(angles=[0, 90])))
    split = datasets.load_test_split("digits")
    assert split is not None
    spec = next(c for c in plan.clients if c.rotation == 90)
    assert spec.test_set is not None
    trainer = build_trainer(spec)
    assert trainer._test_set is not None
    rows, y = trainer._test_set
    index = torch.tensor(spec.test_set)
    torch.testing.assert_close(rows.gather(), rotate(split.x[index], 90))
    assert not torch.equal(rows.gather(), split.x[index])
    assert torch.equal(y, split.y[index])


@pytest.mark.usefixtures("digits_with_a_test_split")
def test_a_permuted_clients_test_labels_are_permuted() -> None:
    plan = plan_run(small_scenario(transform=PermutationTransform(groups=2)))
    split = datasets.load_test_split("digits")
    assert split is not None
    spec = next(
        c for c in plan.clients if c.label_permutation not in (None, list(range(10)))
    )
    permutation = spec.label_permutation
    assert spec.test_set is not None and permutation is not None
    trainer = build_trainer(spec)
    assert trainer._test_set is not None
    expected = torch.tensor(permutation)[split.y[torch.tensor(spec.test_set)]]
    assert torch.equal(trainer._test_set[1], expected)


@pytest.mark.usefixtures("digits_with_a_test_split")
def test_a_class_mix_drift_redraws_the_test_set_with_the_same_weights() -> None:
    mix = [1.0, 3.0] + [0.0] * 8
    scenario = small_scenario(
        clients=20, events=[Drift(start=0, target=[0, 1], class_mix=mix)]
    )
    engine, members = ScenarioEngine(plan_run(scenario)), _Members()
    before = {c: engine.specs[c].test_set for c in (0, 1)}
    asyncio.run(engine.begin_round(members, 0, 0.0))
    test_labels = _test_labels()
    for c in (0, 1):
        drawn = engine.specs[c].test_set
        assert drawn is not None and before[c] is not None
        assert drawn != before[c] and len(drawn) == len(before[c])
        counts = np.bincount(test_labels[drawn], minlength=10)
        assert counts.tolist() == class_counts(np.array(mix), len(drawn)).tolist()
    # Same seed, same redraw.
    again, members = ScenarioEngine(plan_run(scenario)), _Members()
    asyncio.run(again.begin_round(members, 0, 0.0))
    assert again.specs[0].test_set == engine.specs[0].test_set


@pytest.mark.usefixtures("digits_with_a_test_split")
def test_a_rotation_drift_rotates_the_test_images() -> None:
    scenario = small_scenario(events=[Drift(start=0, target=0, rotation=180)])
    engine, members = ScenarioEngine(plan_run(scenario)), _Members()
    asyncio.run(engine.begin_round(members, 0, 0.0))
    spec = engine.specs[0]
    assert spec.rotation == 180 and spec.test_set is not None
    split = datasets.load_test_split("digits")
    assert split is not None
    trainer = build_trainer(spec)
    assert trainer._test_set is not None
    expected = rotate(split.x[torch.tensor(spec.test_set)], 180)
    torch.testing.assert_close(trainer._test_set[0].gather(), expected)


@pytest.mark.usefixtures("digits_with_a_test_split")
def test_the_reported_accuracy_is_the_test_sets_and_the_hold_outs_goes_beside() -> None:
    plan = plan_run(small_scenario())
    trainer = build_trainer(plan.clients[0])
    tested = trainer.evaluate_test_set(plan.initial)
    held_out = trainer.evaluate(plan.initial)
    assert tested is not None and tested.n_samples == len(plan.clients[0].test)
    row = ClientOutcome(ClientId(0), acc=tested.accuracy, val_acc=held_out.accuracy)
    assert row.row(0)["val_acc"] == held_out.accuracy


def test_digits_clients_have_no_test_set_and_their_rows_and_bytes_are_unchanged() -> (
    None
):
    plan = plan_run(small_scenario())
    spec = plan.clients[0]
    assert spec.test_set is None and "test_set" not in spec.data_key()
    trainer = build_trainer(spec)
    assert trainer.evaluate_test_set(plan.initial) is None
    assert "val_acc" not in ClientOutcome(ClientId(0), acc=0.5).row(0)
    reply = EvaluateReply(cluster=0, accuracy=0.5, loss=1.0, n_samples=3)
    assert "val_accuracy" not in reply.model_dump()


@pytest.mark.skipif(
    not datasets.available("fashion_mnist"), reason="Fashion-MNIST not installed"
)
def test_fashion_mnist_clients_draw_from_the_10000_test_images() -> None:
    from clusterfed.scenarios import DatasetSpec

    plan = plan_run(
        small_scenario(
            dataset=DatasetSpec(name="fashion_mnist"),
            partition=ShardsPartition(labels_per_client=2),
            clients=10,
        )
    )
    split = datasets.load_test_split("fashion_mnist")
    assert split is not None and len(split) == 10_000
    for spec in plan.clients:
        assert spec.test_set is not None
        assert max(spec.test_set) < 10_000 and len(spec.test_set) == len(spec.test)
        shares = class_shares(plan.dataset.labels[spec.train], 10)
        counts = np.bincount(split.labels[spec.test_set], minlength=10)
        assert counts.tolist() == class_counts(shares, len(spec.test)).tolist()


@pytest.mark.usefixtures("digits_with_a_test_split")
def test_a_runs_rows_report_the_test_set_and_record_the_hold_out_beside(
    tmp_path: Path,
) -> None:
    import clusterfed

    clusterfed.run(small_scenario(rounds=2), out=tmp_path, workers=1)
    rows = read_rounds(tmp_path)
    clients = [c for r in rows for c in r["clients"] if c["acc"] is not None]
    assert clients and all(0 <= c["val_acc"] <= 1 for c in clients)
    # Both are measured: two sets, two accuracies (not one copied twice).
    assert any(c["val_acc"] != c["acc"] for c in clients)


def test_a_digits_runs_rows_carry_no_hold_out_value(tmp_path: Path) -> None:
    import clusterfed

    clusterfed.run(small_scenario(rounds=1), out=tmp_path, workers=1)
    rows = read_rounds(tmp_path)
    assert all("val_acc" not in c for r in rows for c in r["clients"])


def test_a_test_split_without_a_clients_class_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from clusterfed.errors import ScenarioError
    from clusterfed.scenarios import build

    digits = datasets.load_dataset("digits")
    keep = digits.y != 0
    lacking = datasets.Dataset("digits", digits.x[keep], digits.y[keep], 10)
    monkeypatch.setattr(build, "load_test_split", lambda name, root: lacking)
    with pytest.raises(ScenarioError, match="client 0: class 0 has no image"):
        plan_run(small_scenario())


def test_val_accuracy_round_trips_and_is_off_the_wire_when_unset() -> None:
    from clusterfed.protocol import Envelope, decode, encode

    def wire(reply: EvaluateReply) -> bytes:
        return encode(
            Envelope(
                msg_id="server:1",
                sender="client/0",
                recipient="server",
                round=0,
                payload=reply,
            )
        )

    plain = EvaluateReply(cluster=0, accuracy=0.5, loss=1.0, n_samples=3)
    both = plain.model_copy(update={"val_accuracy": 0.25})
    assert b"val_accuracy" not in wire(plain)
    back = decode(wire(both)).payload
    assert isinstance(back, EvaluateReply) and back.val_accuracy == 0.25
    assert decode(wire(plain)).payload == plain
    with pytest.raises(ValueError):
        EvaluateReply(cluster=0, accuracy=0.5, loss=1.0, n_samples=3, val_accuracy=1.5)
