"""Actors and runtimes: the parameter server, the clients, and what hosts them."""

from __future__ import annotations

from .client import Client, ClientState, client_address
from .clock import DeviceProfile, SimClock, compute_s, transfer_s
from .courier import ClientUnreachable, Courier
from .host import ClientHost
from .outcome import ClientOutcome, Exchange, RoundOutcome
from .runtimes import InlineRuntime, ProcessRuntime, Runtime, local_runtime
from .server import ParameterServer
from .spec import ClientSpec, ScratchModels, build_trainer
from .trainer import EvalResult, LocalTrainer, TrainResult

__all__ = [
    "Client",
    "ClientHost",
    "ClientOutcome",
    "ClientSpec",
    "ClientState",
    "ClientUnreachable",
    "Courier",
    "DeviceProfile",
    "EvalResult",
    "Exchange",
    "InlineRuntime",
    "LocalTrainer",
    "ParameterServer",
    "ProcessRuntime",
    "RoundOutcome",
    "Runtime",
    "ScratchModels",
    "SimClock",
    "TrainResult",
    "build_trainer",
    "client_address",
    "compute_s",
    "local_runtime",
    "transfer_s",
]
