"""Actors and runtimes: the parameter server, the clients, and what hosts them."""

from __future__ import annotations

from . import work
from .client import Client, client_address
from .clock import DeviceProfile, compute_s, transfer_s
from .local import LocalRuntime
from .server import ClientOutcome, Exchange, ParameterServer, RoundOutcome, build_server
from .spec import ClientSpec, ServerSpec, build_trainer
from .trainer import EvalResult, LocalTrainer, TrainResult
from .transport import Transport

__all__ = [
    "Client",
    "ClientOutcome",
    "ClientSpec",
    "DeviceProfile",
    "EvalResult",
    "Exchange",
    "LocalRuntime",
    "LocalTrainer",
    "ParameterServer",
    "RoundOutcome",
    "ServerSpec",
    "TrainResult",
    "Transport",
    "build_server",
    "build_trainer",
    "client_address",
    "compute_s",
    "transfer_s",
    "work",
]
