"""Hostile files (issue 33): a results folder, a trace or a scenario's data
file may come from anyone. Each case the red-team probe reproduced is refused
with one line (exit 2 on the command line, no traceback), within bounded time
and memory, runs no code of the folder's, and echoes no file's contents."""

from __future__ import annotations

import io
import json
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
from pydantic import ValidationError

from clusterfed.actors.trace import TRACE_FILE, read_trace
from clusterfed.cli import main
from clusterfed.protocol import (
    MAX_CLASSES,
    PROTOCOL_VERSION,
    ClassHistogram,
    Envelope,
    ProtocolError,
    decode,
    encode,
)
from clusterfed.protocol.codec import (
    MAX_ITEMS,
    MAX_OBJECTS,
    pack_record,
    read_records,
    to_json_form,
)
from helpers import small_scenario

HEADER = {
    "type": "header",
    "protocol_version": PROTOCOL_VERSION,
    "nonce": "abcdef",
    "mode": "full",
}
MESSAGE = {
    "type": "message",
    "role": "request",
    "dir": "down",
    "client": 0,
    "round": 0,
    "sim": 0.0,
    "wall": 0.0,
    "size": 3,
    "kind": "train_task",
    "msg_id": "server:1",
    "in_reply_to": None,
    "data": b"abc",
    "outcome": None,
}
MiB = 1024 * 1024


def _folder(
    tmp_path: Path, *frames: bytes, scenario: dict[str, Any] | None = None
) -> Path:
    """A results folder: a trace of a header then `frames`, a config.json
    (of `scenario`, or a small valid one) and an empty rounds.jsonl."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / TRACE_FILE).write_bytes(pack_record(HEADER) + b"".join(frames))
    if scenario is None:
        scenario = small_scenario(rounds=1).model_dump(mode="json")
    (folder / "config.json").write_text(json.dumps({"scenario": scenario}))
    (folder / "rounds.jsonl").write_text("")
    return folder


def _frame(body: bytes) -> bytes:
    return len(body).to_bytes(4, "little") + body


def _refused_by_both_commands(
    folder: Path, capsys: pytest.CaptureFixture[str], named: str
) -> None:
    for command in ("trace", "replay"):
        assert main([command, str(folder)]) == 2, command
        captured = capsys.readouterr()
        assert named in captured.err, (command, captured.err)
        assert "Traceback" not in captured.err
        assert len(captured.err.strip().splitlines()) == 1


def test_a_frame_claiming_4_gib_is_refused_before_its_body_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    claim = (2**32 - 1).to_bytes(4, "little") + b"\x80" * 16
    folder = _folder(tmp_path, claim)
    _refused_by_both_commands(folder, capsys, "4294967295 bytes, over the limit")

    asked: list[int] = []

    class Counted(io.BytesIO):
        def read(self, size: int | None = -1, /) -> bytes:
            asked.append(-1 if size is None else size)
            return super().read(size)

    stream = Counted((folder / TRACE_FILE).read_bytes())
    with pytest.raises(ProtocolError, match="record 1: a frame of 4294967295"):
        list(read_records(stream))
    assert max(asked) < 1024  # the header's body, never the claimed one


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (msgpack.packb([1, 2, 3]), "record 1: expected a map, got list"),
        (msgpack.packb({**MESSAGE, "evil": 1}), "record 1: evil: Unexpected"),
        (msgpack.packb({**MESSAGE, "client": "0"}), "record 1: client: Input"),
        (msgpack.packb({**MESSAGE, "data": "text"}), "record 1: data: Input"),
        (msgpack.packb({**MESSAGE, "type": "header"}), "record 1: not a message"),
        (b"\xc1", "record 1: truncated or malformed"),
    ],
    ids=[
        "non-map",
        "unknown key",
        "client as text",
        "data as text",
        "2nd header",
        "bad byte",
    ],
)
def test_a_malformed_record_is_refused_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: bytes, named: str
) -> None:
    _refused_by_both_commands(_folder(tmp_path, _frame(body)), capsys, named)


def test_a_trace_without_a_header_is_not_a_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _folder(tmp_path)
    (folder / TRACE_FILE).write_bytes(pack_record({**HEADER, "mode": "all"}))
    _refused_by_both_commands(folder, capsys, "record 0: mode")
    (folder / TRACE_FILE).write_bytes(pack_record(MESSAGE))
    _refused_by_both_commands(folder, capsys, "not a clusterfed trace")


def _nested_bomb(total: int) -> bytes:
    """Empty maps in arrays of `MAX_ITEMS`, in one array: within every
    per-array limit, at least `total` bytes, each byte an object."""
    inner = b"\xdd" + MAX_ITEMS.to_bytes(4, "big") + b"\x80" * MAX_ITEMS
    count = -(-total // len(inner))  # rounded up
    return b"\xdc" + count.to_bytes(2, "big") + inner * count


def _cost(call: Callable[[], object]) -> tuple[float, int, str]:
    """Seconds `call` takes to raise ProtocolError, its peak of traced memory
    (a second call: tracing slows Python code many times over), the reason."""
    started = time.perf_counter()
    with pytest.raises(ProtocolError) as refused:
        call()
    seconds = time.perf_counter() - started
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError):
            call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return seconds, peak, str(refused.value)


def test_an_8_mib_bomb_record_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    bomb = b"\x82" + msgpack.packb("type") + msgpack.packb("message")
    bomb += msgpack.packb("data") + _nested_bomb(8 * MiB)
    assert len(bomb) >= 8 * MiB
    folder = _folder(tmp_path, _frame(bomb))
    seconds, peak, reason = _cost(lambda: read_trace(folder))
    assert seconds < 1.0
    assert peak < 3 * len(bomb)  # the frame's bytes, then nearly nothing
    assert reason == "record 1: size: more than 64 objects in one message"


def test_a_33_mib_nested_bomb_is_refused_fast_and_small() -> None:
    envelope = {
        "protocol_version": PROTOCOL_VERSION,
        "msg_id": "client:1",
        "sender": "client/1",
        "recipient": "server",
        "round": 0,
        "in_reply_to": None,
    }
    head = msgpack.packb(envelope)
    payload = b"\x83" + msgpack.packb("kind") + msgpack.packb("class_histogram")
    payload += msgpack.packb("client_id") + msgpack.packb(1)
    payload += msgpack.packb("counts") + _nested_bomb(33 * MiB)
    data = bytes([head[0] + 1]) + head[1:] + msgpack.packb("payload") + payload
    assert len(data) >= 33 * MiB
    seconds, peak, reason = _cost(lambda: decode(data))
    assert seconds < 1.0
    assert peak < 100 * MiB
    assert reason == f"size: more than {MAX_OBJECTS} objects in one message"
    small = data[: 2 * MiB]  # the same shape, as replay reads a recorded message
    with pytest.raises(ProtocolError, match="more than .* objects"):
        to_json_form(small)
    # The budget leaves room for the largest message there may be.
    histogram = ClassHistogram(client_id=1, counts=(2**31 - 1,) * MAX_CLASSES)
    envelope = Envelope(
        msg_id="client:1",
        sender="client/1",
        recipient="server",
        round=0,
        payload=histogram,
    )
    assert decode(encode(envelope)).payload == histogram


def test_array_headers_claiming_more_than_the_bytes_left_allocate_nothing() -> None:
    # msgpack allocates an array's slots at its header: a thousand open
    # headers of 65,535 items would reserve half a gigabyte.
    data = b"\xdc\xff\xff" * 1000
    _, peak, reason = _cost(lambda: decode(data))
    assert peak < 1 * MiB
    assert reason.startswith("truncated or malformed message: 65535 objects still")


def test_terminal_escapes_in_a_trace_are_printed_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    evil = {**MESSAGE, "kind": "\x1b[2J\x1b[31mtrain_task"}
    reply = {
        **MESSAGE,
        "role": "reply",
        "dir": "up",
        "kind": None,
        "data": None,
        "outcome": "Oops: \x1b]0;owned\x07\nforged line",
    }
    folder = _folder(tmp_path, pack_record(evil), pack_record(reply))
    assert main(["trace", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b[2J\\x1b[31mtrain_task" in out
    assert "\\x1b]0;owned\\x07\\nforged line" in out
    assert main(["trace", str(folder), "--json"]) == 0
    assert "\x1b" not in capsys.readouterr().out


def test_an_error_naming_hostile_text_is_printed_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = small_scenario(rounds=1).model_dump(mode="json")
    scenario["\x1b[31mevil"] = 1  # the field's name is quoted as it is
    folder = _folder(tmp_path, scenario=scenario)
    assert main(["replay", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[31mevil: unknown field" in err


EVIL = """
from pathlib import Path

Path(__file__).with_name("imported").write_text("evilmod ran")

from clusterfed.algorithms.fedavg import FedAvg


class X(FedAvg):
    pass
"""


def test_replay_imports_no_code_from_the_folder_without_trust(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = small_scenario(rounds=1).model_dump(mode="json")
    scenario["algorithm"] = "evilmod:X"
    folder = _folder(tmp_path, scenario=scenario)
    (folder / "evilmod.py").write_text(EVIL)
    monkeypatch.chdir(folder)  # as the probe ran it: from inside the folder
    monkeypatch.setattr(sys, "path", [*sys.path, "", str(folder)])
    monkeypatch.delitem(sys.modules, "evilmod", raising=False)
    assert main(["replay", "."]) == 2
    err = capsys.readouterr().err
    assert "'evilmod' is not installed" in err and "--trust" in err
    assert not (folder / "imported").exists()
    assert "evilmod" not in sys.modules
    # Told to trust the folder, replay imports it, as `run` would.
    main(["replay", ".", "--trust"])
    assert (folder / "imported").read_text() == "evilmod ran"
    capsys.readouterr()


def test_an_installed_module_class_algorithm_replays_without_trust(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clusterfed.algorithms import registry

    monkeypatch.chdir(tmp_path)
    with registry.no_local_code(tmp_path):
        # tests_plugin is importable from the tests' folder, not the current one.
        assert registry.resolve("tests_plugin:FedMedian").__name__ == "FedMedian"


def test_a_trace_without_the_joins_it_needs_is_refused_not_indexed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(_folder(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert "holds no (further) join request of client 0" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "secret",
    [
        "root:x:0:0:s3cret-token:/root:/bin/bash",
        "s3cret-token,0,10",
        "0,s3cret-token,10",
        "0,0,s3cret-token",
    ],
)
def test_a_refused_availability_file_is_named_not_quoted(
    tmp_path: Path, secret: str
) -> None:
    path = tmp_path / "private"
    path.write_text(secret + "\nsecond line\n")
    with pytest.raises(ValidationError) as caught:
        small_scenario(availability={"kind": "trace", "path": str(path)})
    reason = str(caught.value)
    assert f"path {str(path)!r} line 1" in reason
    assert "s3cret" not in reason


def test_etc_passwd_as_availability_prints_none_of_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    passwd = Path("/etc/passwd")
    if not passwd.is_file():
        pytest.skip("no /etc/passwd here")
    first = passwd.read_text().splitlines()[0]
    scenario = tmp_path / "s.toml"
    scenario.write_text(
        'name = "s"\nclients = 2\nrounds = 1\n'
        '[availability]\nkind = "trace"\npath = "/etc/passwd"\n'
    )
    assert main(["run", str(scenario), "--quiet", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "/etc/passwd" in err and first not in err
