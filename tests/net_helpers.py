"""Helpers of the network tests: `clusterfed serve` and clients as processes,
and a raw connection that speaks the transport by hand."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from clusterfed.protocol.transport import (
    PREFIX,
    Challenge,
    Control,
    Hello,
    Want,
    decode_control,
    encode_control,
    frame,
)

ROOT = Path(__file__).resolve().parent.parent
STRAGGLER_SCENARIO = """
from clusterfed.actors.clock import Deadline
from clusterfed.scenarios import Scenario, Straggle
from clusterfed.scenarios.builtin import quickstart

# quickstart; client 3 computes 50 times slower in rounds 0 and 1,
# past the 2 s deadline (late), and on time in round 2.
scenario = Scenario(
    **{
        **dict(quickstart()),
        "name": "quickstart-straggler",
        "rounds": ROUNDS,
        "events": [Straggle(start=0, target=3, factor=50, rounds=2)],
        "deadline": Deadline(seconds=2.0),
        "task_timeout_s": TIMEOUT,
    }
)
"""


def straggler_scenario(
    folder: Path, task_timeout_s: float = 120.0, rounds: int = 3
) -> Path:
    path = folder / "straggler.py"
    text = STRAGGLER_SCENARIO.replace("TIMEOUT", repr(task_timeout_s))
    path.write_text(text.replace("ROUNDS", str(rounds)))
    return path


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "clusterfed.cli", *args]


class Served:
    """A `clusterfed serve` process, its address and its tokens."""

    def __init__(self, scenario: Path | str, out: Path, *args: str) -> None:
        self.out = out
        self.process = subprocess.Popen(
            cli("serve", str(scenario), "--out", str(out), "--workers", "2",
                "--quiet", *args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )  # fmt: skip
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("listening on "):
            self.process.kill()
            raise AssertionError(f"serve did not listen: {line!r} {self.stderr()}")
        host, _, port = line.split()[-1].rpartition(":")
        self.host, self.port = host, int(port)
        self.tokens = {
            int(k): v for k, v in json.loads((out / "tokens.json").read_text()).items()
        }

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def client(self, client_id: int, token: str | None = None) -> subprocess.Popen[str]:
        """`clusterfed client` for `client_id`, as a process."""
        return subprocess.Popen(
            cli("client", "--connect", self.address, "--id", str(client_id),
                "--token", token or self.tokens[client_id]),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )  # fmt: skip

    def wait(self, timeout: float = 240) -> str:
        """Wait for the run to end; its stdout (AssertionError if it failed)."""
        out, err = self.process.communicate(timeout=timeout)
        assert self.process.returncode == 0, err
        return out

    def stderr(self) -> str:
        if self.process.poll() is None:
            self.process.kill()
        return self.process.stderr.read() if self.process.stderr else ""


def rows(out: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()
    ]


def without_wall_time(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k != "wall_time"} for row in found]


class Raw:
    """A connection that speaks the transport by hand, frame by frame."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, host: str, port: int) -> Raw:
        return cls(*await asyncio.open_connection(host, port))

    async def send(self, body: bytes) -> None:
        self.writer.write(frame(body))
        await self.writer.drain()

    async def send_raw(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def control(self, timeout: float = 20) -> Control:
        prefix = await asyncio.wait_for(self.reader.readexactly(4), timeout)
        (size,) = PREFIX.unpack(prefix)
        return decode_control(await self.reader.readexactly(size))

    async def hello(self, client_id: int, want: tuple[Want, ...] = ()) -> Challenge:
        hello = Hello(protocol_version=2, client_id=client_id, want=want)
        await self.send(encode_control(hello))
        challenge = await self.control()
        assert isinstance(challenge, Challenge), challenge
        return challenge

    async def closed_within(self, seconds: float) -> float:
        """Seconds until the server closes the connection (reading what it
        sends meanwhile); AssertionError past `seconds`."""
        start = time.monotonic()
        try:
            async with asyncio.timeout(seconds):
                while await self.reader.read(65536):
                    pass
        except TimeoutError:
            raise AssertionError(f"still open after {seconds} s") from None
        except ConnectionError:
            pass
        return time.monotonic() - start

    def close(self) -> None:
        self.writer.close()
