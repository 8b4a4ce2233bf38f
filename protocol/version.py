"""The wire protocol version; a peer speaking another version is refused."""

from __future__ import annotations

PROTOCOL_VERSION = 1
