"""The wire protocol version; a peer speaking another version is refused."""

from __future__ import annotations

PROTOCOL_VERSION = 2
"""1: the first published protocol. 2: the global model travels as "global"
(no longer as the cluster id 2³¹ − 1), and an update reports `samples_seen`
instead of `compute_s` (a probe reply reports no time): the server's clock
times every task; an update may carry `importance` (FedSoft's weights, one
per model of the task, not sent otherwise) or `losses` (FedDrift's scores of
each model, the same way); a describe task may want a `data_subspace`,
answered by the `data_subspace` message (PACFL's); an evaluate reply may
carry `val_accuracy` (the hold-out's accuracy beside a test-set accuracy,
not sent otherwise). The history is in docs/protocol.md."""
