"""A scenario as a Python script: run it with

    clusterfed run examples/planted_groups.py

A script defines `scenario` (or a `build()` returning one); it is validated by
the same models as a TOML file.
"""

from clusterfed.protocol import TrainConfig
from clusterfed.scenarios import ClassTablePartition, ModelSpec, Scenario

# Two planted groups: the first holds digits 0-4, the second 5-9.
LOW = [1, 1, 1, 1, 1, 0, 0, 0, 0, 0]
HIGH = [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]

scenario = Scenario(
    name="planted-groups",
    description="two groups of clients with disjoint label sets",
    partition=ClassTablePartition(table=[LOW, HIGH]),
    model=ModelSpec(name="cnn"),
    train=TrainConfig(lr=0.05, batch_size=16),
    clients=10,
    rounds=15,
)
