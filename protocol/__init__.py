"""The clusterfed wire protocol: typed messages, msgpack codec, protocol version.

This package imports nothing else from clusterfed and nothing from Ray, so any
process (a Ray worker, a test, another implementation) can speak it alone.
"""

from __future__ import annotations

from .codec import MAX_MESSAGE_BYTES, Encoder, decode, describe, encode, encode_many
from .errors import ClusterfedError, ProtocolError
from .messages import (
    MAX_CLASSES,
    MAX_PEER_MODELS,
    MESSAGE_KINDS,
    ClassHistogram,
    ClusterModel,
    DescribeTask,
    Envelope,
    ErrorReply,
    EvaluateReply,
    EvaluateTask,
    IdentityRule,
    JoinRequest,
    LeaveNotice,
    Message,
    PeerModel,
    ProbeReply,
    ProbeScore,
    ProbeTask,
    Shutdown,
    TrainConfig,
    TrainTask,
    UpdateReply,
    Welcome,
)
from .tensor import FlatVector, Tensor
from .version import PROTOCOL_VERSION

__all__ = [
    "MAX_CLASSES",
    "MAX_MESSAGE_BYTES",
    "MAX_PEER_MODELS",
    "MESSAGE_KINDS",
    "PROTOCOL_VERSION",
    "ClassHistogram",
    "ClusterModel",
    "ClusterfedError",
    "Encoder",
    "DescribeTask",
    "Envelope",
    "ErrorReply",
    "EvaluateReply",
    "EvaluateTask",
    "FlatVector",
    "IdentityRule",
    "JoinRequest",
    "LeaveNotice",
    "Message",
    "PeerModel",
    "ProbeReply",
    "ProbeScore",
    "ProbeTask",
    "ProtocolError",
    "Shutdown",
    "Tensor",
    "TrainConfig",
    "TrainTask",
    "UpdateReply",
    "Welcome",
    "decode",
    "describe",
    "encode",
    "encode_many",
]
