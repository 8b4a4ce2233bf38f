"""FedProx: FedAvg whose clients add a proximal term to their loss.

Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, "Federated Optimization in
Heterogeneous Networks", MLSys 2020.

Each client minimises its loss plus μ/2·‖w − w_global‖², where w_global is the
model it received; the server aggregates as FedAvg does. The term is applied
by the client's trainer (`TrainConfig.mu`), under local DP too (it reads no
data, so it joins the noisy gradient after clipping). The paper's tolerance of
partial work (γ-inexact solutions from stragglers) is not modelled: a late
update is late, as for every algorithm.
"""

from __future__ import annotations

import math

from clusterfed.protocol import TrainConfig

from .fedavg import FedAvg


class FedProx(FedAvg):
    """FedAvg with the proximal coefficient `mu` sent to the clients.

    Args:
        mu: the proximal coefficient μ ≥ 0; 0 is FedAvg exactly.
        fraction: share of available clients sampled each round.
        server_lr: step applied to the mean delta (1.0 is plain averaging).
    """

    name = "fedprox"

    def __init__(
        self, *, mu: float = 0.01, fraction: float = 1.0, server_lr: float = 1.0
    ) -> None:
        super().__init__(fraction=fraction, server_lr=server_lr)
        if not (mu >= 0 and math.isfinite(mu)):
            raise ValueError(f"mu must be a finite number ≥ 0, got {mu}")
        self.mu = float(mu)

    def train_config(self, base: TrainConfig) -> TrainConfig:
        return TrainConfig.model_validate({**base.model_dump(), "mu": self.mu})
