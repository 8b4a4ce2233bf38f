"""The messages of clusterfed: one frozen pydantic model per kind, one union.

Every payload is tagged by `kind`; `Message` is their discriminated union and
`Envelope` wraps one payload with who sent it, to whom, for which round, and
under which protocol version. No message type carries raw samples.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from .tensor import FlatVector
from .version import PROTOCOL_VERSION

NonNegInt = Annotated[int, Field(ge=0)]


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
    """The flat weights of one cluster's model, and its last update if asked."""

    cluster: NonNegInt
    weights: FlatVector
    last_update: FlatVector | None = Field(
        None, description="the cluster model's change in its last round"
    )


PolicyParam = float | int | str | bool


class IdentityRule(_Frozen):
    """How a client picks one of several models: a policy name and its params."""

    name: str = Field(min_length=1, max_length=64)
    params: dict[str, PolicyParam] = Field(default_factory=dict)


class JoinRequest(_Frozen):
    """A client asks to take part; it describes only how much data it holds."""

    kind: Literal["join_request"] = "join_request"
    client_id: NonNegInt
    n_train: NonNegInt
    n_test: NonNegInt


class LeaveNotice(_Frozen):
    """A client leaves the federation for good."""

    kind: Literal["leave"] = "leave"
    client_id: NonNegInt
    reason: str = ""


class Welcome(_Frozen):
    """The server accepts a client and tells it its first cluster."""

    kind: Literal["welcome"] = "welcome"
    client_id: NonNegInt
    cluster: NonNegInt | None = None


class TrainTask(_Frozen):
    """Train from one of `models`: the only one, or the one `identity` picks."""

    kind: Literal["train_task"] = "train_task"
    models: tuple[ClusterModel, ...] = Field(min_length=1)
    config: TrainConfig
    identity: IdentityRule | None = None


class UpdateReply(_Frozen):
    """A client's result: the delta (new − received weights) and its costs."""

    kind: Literal["update_reply"] = "update_reply"
    cluster: NonNegInt
    delta: FlatVector
    n_samples: NonNegInt
    loss: float
    compute_s: float = Field(ge=0, description="simulated compute time")
    epsilon: float | None = Field(
        None,
        ge=0,
        description="local DP: the privacy (ε at the run's δ) the client has"
        " spent so far, this update included; None without DP",
    )


class EvaluateTask(_Frozen):
    """Evaluate `model` on the client's held-out split."""

    kind: Literal["evaluate_task"] = "evaluate_task"
    model: ClusterModel


class EvaluateReply(_Frozen):
    kind: Literal["evaluate_reply"] = "evaluate_reply"
    cluster: NonNegInt
    accuracy: float = Field(ge=0, le=1)
    loss: float
    n_samples: NonNegInt


class ErrorReply(_Frozen):
    """A request that could not be served, and why."""

    kind: Literal["error"] = "error"
    code: str
    message: str


class Shutdown(_Frozen):
    kind: Literal["shutdown"] = "shutdown"
    reason: str = ""


Message = Annotated[
    JoinRequest
    | LeaveNotice
    | Welcome
    | TrainTask
    | UpdateReply
    | EvaluateTask
    | EvaluateReply
    | ErrorReply
    | Shutdown,
    Field(discriminator="kind"),
]


class Envelope(_Frozen):
    """One message on the wire: routing and versioning around a payload."""

    protocol_version: int = PROTOCOL_VERSION
    msg_id: str = Field(min_length=1, max_length=128)
    sender: str = Field(min_length=1, max_length=128)
    recipient: str = Field(min_length=1, max_length=128)
    round: int = Field(ge=-1, description="-1 outside any round, e.g. a join")
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
    "error",
    "shutdown",
)
