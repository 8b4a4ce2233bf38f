"""The messages of clusterfed: one frozen pydantic model per kind, one union.

Every payload is tagged by `kind`; `Message` is their discriminated union and
`Envelope` wraps one payload with who sent it, to whom, for which round, and
under which protocol version. No message type carries raw samples.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

import numpy as np
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    model_validator,
)

from .tensor import FlatVector, FloatMatrix
from .version import PROTOCOL_VERSION

MAX_COUNT = 2**31 - 1
"""The largest count (of samples, of a class) a message may carry."""
MAX_LOSS = 1e12
"""The largest loss a reply may report."""
MAX_EPSILON = 1e6
"""The largest privacy spend (ε) a reply may report."""
MAX_CLASSES = 65_536
"""The longest class histogram a client may send."""
MAX_BASIS = 1024
"""The most vectors a data subspace may hold, and the most a describe task may
ask for per class."""
MAX_PEER_MODELS = 1024
"""The most models one probe task may carry."""
MAX_MODELS = 1024
"""The most models one train task may carry."""
MAX_POLICY_PARAMS = 32
"""The most parameters an identity rule may carry."""
MAX_TEXT = 1024
"""The longest free text (a reason, an error's message) a message may carry."""

# Every number a peer reports is strict (no string, float or bool read as a
# count, no string or bool read as a float) and bounded: a count that sums
# into a model's weight, or a time that sums into the simulated clock, cannot
# overflow what it is added to.
NonNegInt = Annotated[int, Field(ge=0)]  # what the server builds (numpy ints too)
Id = Annotated[int, Field(strict=True, ge=0, le=MAX_COUNT)]  # what a client reports
Count = Annotated[int, Field(strict=True, ge=0, le=MAX_COUNT)]
Loss = Annotated[float, Field(strict=True, ge=0, le=MAX_LOSS)]
Share = Annotated[float, Field(strict=True, ge=0, le=1)]
MIXTURE_TOLERANCE = 1e-6
"""How far from 1 a mixture's weights may sum (float rounding)."""


def _sums_to_one(weights: tuple[float, ...]) -> tuple[float, ...]:
    total = math.fsum(weights)
    if not abs(total - 1) <= MIXTURE_TOLERANCE:
        raise ValueError(f"mixture weights sum to {total:.9g}, not 1")
    return weights


# A mixture's weights (FedEM's π): one share per model, summing to 1.
MixtureWeights = Annotated[
    tuple[Share, ...],
    Field(min_length=1, max_length=MAX_MODELS, fail_fast=True),
    AfterValidator(_sums_to_one),
]


def _plain_int(value: object) -> object:
    """A numpy integer as the int it holds (the server's cluster ids may come
    from numpy); any other value unchanged, for the strict check."""
    return int(value) if isinstance(value, np.integer) else value


GLOBAL_MODEL = "global"
"""The name a model of no cluster travels under (DCFL's W_G, the mean of the
cluster models): `clusterfed.types.GLOBAL`, spelled here again because this
package imports nothing else from clusterfed."""
# Which model a task carries or a reply names: a cluster's id, or "global".
# Strict both ways: no string, float or bool is read as an id, and no id
# stands for the global model.
ModelName = (
    Annotated[
        int,
        Field(strict=True, ge=0, le=MAX_COUNT),
        BeforeValidator(_plain_int),  # runs first, on what the server built
    ]
    | Literal["global"]
)  # what the server builds
ReportedModel = Id | Literal["global"]  # what a client names


class _Frozen(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, allow_inf_nan=False, arbitrary_types_allowed=True
    )


class TrainConfig(_Frozen):
    """How a client trains one task: plain SGD settings plus algorithm extras."""

    lr: float = Field(0.05, gt=0)
    momentum: float = Field(0.9, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    batch_size: int = Field(16, gt=0)
    epochs: int = Field(1, gt=0)
    mu: float = Field(0.0, ge=0, description="FedProx proximal coefficient")


class ClusterModel(_Frozen):
    """The flat weights of one model, and its last update if asked: a
    cluster's (`cluster` is its id) or the global model (`"global"`)."""

    cluster: ModelName
    weights: FlatVector
    last_update: FlatVector | None = Field(
        None, description="the cluster model's change in its last round"
    )


PolicyParam = float | int | str | bool


class IdentityRule(_Frozen):
    """How a client picks one of several models: a policy name and its params."""

    name: str = Field(min_length=1, max_length=64)
    params: dict[str, PolicyParam] = Field(
        default_factory=dict, max_length=MAX_POLICY_PARAMS
    )


class JoinRequest(_Frozen):
    """A client asks to take part; it describes only how much data it holds."""

    kind: Literal["join_request"] = "join_request"
    client_id: Id
    n_train: Count
    n_test: Count


class LeaveNotice(_Frozen):
    """A client leaves the federation for good."""

    kind: Literal["leave"] = "leave"
    client_id: Id
    reason: str = Field("", max_length=MAX_TEXT)


class Welcome(_Frozen):
    """The server accepts a client and tells it its first cluster."""

    kind: Literal["welcome"] = "welcome"
    client_id: NonNegInt
    cluster: NonNegInt | None = None


class TrainTask(_Frozen):
    """Train from one of `models`: the only one, or the one `identity` picks
    (or, for a mixture rule, every one: FedEM's)."""

    kind: Literal["train_task"] = "train_task"
    models: tuple[ClusterModel, ...] = Field(
        min_length=1, max_length=MAX_MODELS, fail_fast=True
    )
    config: TrainConfig
    identity: IdentityRule | None = None
    mixture: MixtureWeights | None = Field(
        None,
        # Absent from the wire while None: every other task keeps its bytes.
        exclude_if=lambda value: value is None,
        description="a mixture rule's (FedEM's) weight of each model, in the"
        " task's order: the client's mixture weights before this task",
    )

    @model_validator(mode="after")
    def _one_weight_per_model(self) -> TrainTask:
        if self.mixture is not None and len(self.mixture) != len(self.models):
            raise ValueError(
                f"{len(self.mixture)} mixture weights for {len(self.models)} models"
            )
        return self


class UpdateReply(_Frozen):
    """A client's result: the delta (new − received weights) and its work.

    The client reports how many samples it processed, never how long that
    took: the server's clock owns the clients' devices and straggler
    slowdowns, and turns `samples_seen` into simulated compute time.
    """

    kind: Literal["update_reply"] = "update_reply"
    cluster: ReportedModel = Field(description="the model trained, as sent")
    delta: FlatVector
    n_samples: Count
    loss: Loss
    samples_seen: Count = Field(
        description="samples processed for this task: every training batch of"
        " every epoch, and what an identity rule evaluated to pick a model"
    )
    epsilon: float | None = Field(
        None,
        strict=True,
        ge=0,
        le=MAX_EPSILON,
        description="local DP: the privacy (ε at the run's δ) the client has"
        " spent so far, this update included; None without DP",
    )
    importance: tuple[Share, ...] | None = Field(
        None,
        min_length=1,
        max_length=MAX_MODELS,
        fail_fast=True,
        # Absent from the wire while None, so that every other algorithm's
        # replies keep their bytes (and the runs their byte counts).
        exclude_if=lambda value: value is None,
        description="an importance rule's weights (FedSoft's), or a mixture"
        " rule's new mixture weights (FedEM's): one per model of the task, in"
        " its order, summing to 1; not sent for any other task",
    )
    components: tuple[FlatVector, ...] | None = Field(
        None,
        min_length=1,
        max_length=MAX_MODELS,
        fail_fast=True,
        exclude_if=lambda value: value is None,
        description="a mixture rule's (FedEM's) deltas of the task's other"
        " models, every one but `cluster`, in the task's order; `delta` is"
        " `cluster`'s. Not sent for any other task",
    )
    losses: tuple[Loss, ...] | None = Field(
        None,
        min_length=1,
        max_length=MAX_MODELS,
        fail_fast=True,
        # Absent from the wire while None, as `importance` is.
        exclude_if=lambda value: value is None,
        description="a loss-reporting rule's scores (FedDrift's): the mean"
        " training loss of each model of the task, in its order, measured"
        " before training; not sent for any other task",
    )


class EvaluateTask(_Frozen):
    """Evaluate `model` on the client's test set (drawn from the dataset's
    test split), else on its held-out split."""

    kind: Literal["evaluate_task"] = "evaluate_task"
    model: ClusterModel
    others: tuple[ClusterModel, ...] | None = Field(
        None,
        min_length=1,
        max_length=MAX_MODELS,
        fail_fast=True,
        exclude_if=lambda value: value is None,
        description="a mixture's (FedEM's) other models: the client evaluates"
        " the mixture of `model` and these, weighted by `mixture`",
    )
    mixture: MixtureWeights | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="with `others`: the weight of `model`, then of each of"
        " `others`; the prediction is the weighted mean of their softmaxes",
    )

    @model_validator(mode="after")
    def _a_whole_mixture(self) -> EvaluateTask:
        if (self.others is None) != (self.mixture is None):
            raise ValueError("an evaluate task names both others and mixture, or none")
        others, mixture = self.others or (), self.mixture or ()
        if others and len(mixture) != 1 + len(others):
            raise ValueError(
                f"{len(mixture)} mixture weights for {1 + len(others)} models"
            )
        return self


class EvaluateReply(_Frozen):
    kind: Literal["evaluate_reply"] = "evaluate_reply"
    cluster: ReportedModel = Field(description="the model evaluated, as sent")
    accuracy: Share
    loss: Loss
    n_samples: Count
    val_accuracy: Share | None = Field(
        None,
        # Absent from the wire while None, so a client without a test set
        # (digits) answers with the bytes of before.
        exclude_if=lambda value: value is None,
        description="where `accuracy` is the client's test set from the"
        " dataset's test split: its accuracy on its hold-out (validation"
        " data), sent beside; None otherwise",
    )


class DescribeTask(_Frozen):
    """The server asks a client to describe its data, because the strategy wants it.

    Two descriptions exist, and a client sends one only when asked:
    `class_histogram`, CAFA's (Zhang et al.): how many training samples of
    each class the client holds; and `data_subspace`, PACFL's (Vahidian et
    al.): the first `n_basis` left singular vectors of the client's flattened
    training data, of each class it holds (`per_class`) or of all of it.
    `n_basis` and `per_class` go with `data_subspace` only, and are left off
    the wire otherwise (a `class_histogram` task is sent as in version 1).
    """

    kind: Literal["describe_task"] = "describe_task"
    want: Literal["class_histogram", "data_subspace"] = "class_histogram"
    # Both absent from the wire while None, so that a class_histogram task
    # keeps its bytes (and CAFA's runs their byte counts).
    n_basis: int | None = Field(
        None,
        strict=True,
        ge=1,
        le=MAX_BASIS,
        exclude_if=lambda value: value is None,
        description="data_subspace: the singular vectors asked (per class)",
    )
    per_class: bool | None = Field(
        None,
        strict=True,
        exclude_if=lambda value: value is None,
        description="data_subspace: one SVD per class held, or one of all the data",
    )

    @model_validator(mode="after")
    def _fits_want(self) -> DescribeTask:
        asks = (self.n_basis, self.per_class)
        if self.want == "data_subspace" and None in asks:
            raise ValueError("a data_subspace task names n_basis and per_class")
        if self.want == "class_histogram" and asks != (None, None):
            raise ValueError("a class_histogram task takes no n_basis or per_class")
        return self


class ClassHistogram(_Frozen):
    """A client's answer to a describe task: its training samples per class."""

    kind: Literal["class_histogram"] = "class_histogram"
    client_id: Id
    counts: tuple[Count, ...] = Field(
        min_length=1, max_length=MAX_CLASSES, fail_fast=True
    )


def _bounded_basis(basis: np.ndarray) -> np.ndarray:
    rows, columns = basis.shape
    if rows < 1 or not 1 <= columns <= MAX_BASIS:
        raise ValueError(
            f"a data subspace of shape {basis.shape}: it needs at least 1 row"
            f" and 1 to {MAX_BASIS} vectors"
        )
    return basis


class DataSubspace(_Frozen):
    """A client's answer to a `data_subspace` describe task: the first left
    singular vectors of its training data, one flattened sample per column of
    the SVD's matrix (per class, the classes' blocks side by side), as the
    columns of a float32 matrix of d rows (the model's input size).

    It carries no sample, but it says which directions span most of the
    client's inputs (of each class, per class): what its data look like, as
    a class histogram says which labels it holds.
    """

    kind: Literal["data_subspace"] = "data_subspace"
    client_id: Id
    basis: Annotated[FloatMatrix, AfterValidator(_bounded_basis)]


class PeerModel(_Frozen):
    """A model a client is asked to score: whose model it is, and its weights."""

    owner: NonNegInt = Field(description="the client that trained it")
    weights: FlatVector


class ProbeTask(_Frozen):
    """Score each of `models` (peers' models, shared through the server) on the
    client's held-out split: model sharing, as in CAFA's ABFA."""

    kind: Literal["probe_task"] = "probe_task"
    models: tuple[PeerModel, ...] = Field(
        min_length=1, max_length=MAX_PEER_MODELS, fail_fast=True
    )


class ProbeScore(_Frozen):
    """How one peer's model did on the client's held-out split."""

    owner: Id
    accuracy: Share
    loss: Loss


class ProbeReply(_Frozen):
    """One score per model of the probe task, on `n_samples` held-out samples.

    Its work (the held-out split once per model) is known to the server,
    which times it on its clock."""

    kind: Literal["probe_reply"] = "probe_reply"
    scores: tuple[ProbeScore, ...] = Field(
        min_length=1, max_length=MAX_PEER_MODELS, fail_fast=True
    )
    n_samples: Count


class ErrorReply(_Frozen):
    """A request that could not be served, and why."""

    kind: Literal["error"] = "error"
    code: str = Field(max_length=64)
    message: str = Field(max_length=MAX_TEXT)

    @classmethod
    def of(cls, code: str, message: str) -> ErrorReply:
        """The reply a sender builds: its message cut to the bound, where a
        receiver refuses a longer one (an exception's text can be long)."""
        return cls(code=code, message=message[:MAX_TEXT])


class Shutdown(_Frozen):
    kind: Literal["shutdown"] = "shutdown"
    reason: str = Field("", max_length=MAX_TEXT)


Message = Annotated[
    JoinRequest
    | LeaveNotice
    | Welcome
    | TrainTask
    | UpdateReply
    | EvaluateTask
    | EvaluateReply
    | DescribeTask
    | ClassHistogram
    | DataSubspace
    | ProbeTask
    | ProbeReply
    | ErrorReply
    | Shutdown,
    Field(discriminator="kind"),
]


class Envelope(_Frozen):
    """One message on the wire: routing and versioning around a payload."""

    protocol_version: int = Field(PROTOCOL_VERSION, strict=True)
    msg_id: str = Field(min_length=1, max_length=128)
    sender: str = Field(min_length=1, max_length=128)
    recipient: str = Field(min_length=1, max_length=128)
    round: int = Field(
        ge=-1, le=MAX_COUNT, strict=True, description="-1 outside any round"
    )
    in_reply_to: str | None = Field(None, max_length=128)
    payload: Message


ENVELOPE_ADAPTER: TypeAdapter[Envelope] = TypeAdapter(Envelope)
MESSAGE_KINDS: tuple[str, ...] = (
    "join_request",
    "leave",
    "welcome",
    "train_task",
    "update_reply",
    "evaluate_task",
    "evaluate_reply",
    "describe_task",
    "class_histogram",
    "data_subspace",
    "probe_task",
    "probe_reply",
    "error",
    "shutdown",
)
