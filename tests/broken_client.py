"""A deliberately broken client for the conformance suite's tests: our
reference client with four planted faults, each of which one case must
report (and no other):

- its evaluate replies name another request in `in_reply_to` (echoes ids);
- its updates report one sample fewer than it holds (keeps its sample count);
- a frame that is not msgpack kills it (malformed frame);
- it answers a message of protocol version 3 as if it were 2 (newer
  protocol version).

    python tests/broken_client.py --connect HOST:PORT --id N --token T
"""

from __future__ import annotations

import argparse
import asyncio
import os

from clusterfed.actors.client import Client
from clusterfed.net_client import ReferenceClient
from clusterfed.protocol import EvaluateReply, UpdateReply, decode, encode

NEWER = b"\xb0protocol_version\x03"


class BrokenClient(Client):
    async def handle(self, data: bytes) -> bytes | None:
        if data[:1] == b"\xc1":
            os._exit(3)  # dies on a malformed frame
        data = bytes(data).replace(NEWER, b"\xb0protocol_version\x02", 1)
        reply = await super().handle(data)
        if reply is None:
            return None
        envelope = decode(reply)
        payload = envelope.payload
        if isinstance(payload, EvaluateReply):
            envelope = envelope.model_copy(update={"in_reply_to": "0000:0"})
        if isinstance(payload, UpdateReply):
            fewer = payload.model_copy(update={"n_samples": payload.n_samples - 1})
            envelope = envelope.model_copy(update={"payload": fewer})
        return encode(envelope)


class BrokenReferenceClient(ReferenceClient):
    """The reference client around a `BrokenClient`."""

    def __setattr__(self, name: str, value: object) -> None:
        if name == "client" and isinstance(value, Client):
            value = BrokenClient(value.spec)
        super().__setattr__(name, value)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connect", required=True)
    parser.add_argument("--id", type=int, required=True)
    parser.add_argument("--token", required=True)
    args = parser.parse_args()
    host, _, port = args.connect.rpartition(":")
    client = BrokenReferenceClient(host, int(port), args.id, args.token)
    print(asyncio.run(client.run()))


if __name__ == "__main__":
    main()
