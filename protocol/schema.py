"""The published protocol: a JSON Schema of the envelope and every message kind.

Generated from the pydantic models, so it cannot drift from what `decode`
accepts. It describes a message in its JSON form (`codec.to_json_form`): the
msgpack map as JSON values, each tensor extension shown by its ext code,
dtype, shape and size; the extension's own byte layout is in the tensor
field's description and in docs/protocol.md.
"""

from __future__ import annotations

from typing import Any, get_args

from .messages import ENVELOPE_ADAPTER, Message
from .version import PROTOCOL_VERSION

DRAFT = "https://json-schema.org/draft/2020-12/schema"


def message_kinds() -> list[str]:
    """Every `kind` of the `Message` union."""
    return [
        model.model_fields["kind"].default for model in get_args(get_args(Message)[0])
    ]


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of an envelope of this protocol version."""
    schema = ENVELOPE_ADAPTER.json_schema(mode="validation")
    return {
        "$schema": DRAFT,
        "$id": f"urn:clusterfed:protocol:{PROTOCOL_VERSION}:envelope",
        **schema,
        "title": f"clusterfed envelope, protocol version {PROTOCOL_VERSION}",
        "x-message-kinds": message_kinds(),
    }
