"""Read back what the real trackers wrote, through their own readers or, for wandb offline, its run folder."""

from __future__ import annotations

import glob
import json
import os
import struct
from typing import Any

# wandb's transaction log (run-<id>.wandb): a 7-byte header (":W&B", magic 0xBEE1, version 0), then LevelDB log
# framing: 32 KiB blocks of records, each with a 7-byte header (crc32, length, type) and a chunk of a protobuf.
_BLOCK = 32 * 1024
_HEADER = 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _wandb_records(path: str) -> list[bytes]:
    with open(path, "rb") as fh:
        data = fh.read()
    assert data[:4] == b":W&B" and struct.unpack("<H", data[4:6])[0] == 0xBEE1, f"{path}: not a wandb log"
    records, pending, pos = [], b"", _HEADER
    while pos + _HEADER <= len(data):
        if _BLOCK - pos % _BLOCK < _HEADER:  # a block's tail too short for a header is zero padding
            pos += _BLOCK - pos % _BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + _HEADER])
        chunk = data[pos + _HEADER:pos + _HEADER + length]
        pos += _HEADER + length
        if kind == _FULL:
            records.append(chunk)
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            records.append(pending + chunk)
        elif kind == 0 and length == 0:
            break  # preallocated zeros at the end of an unfinished block
    return records


def _item_key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)


def read_wandb_offline_run(run_dir: str) -> dict[str, Any]:
    """history {step: {key: value}}, config {key: value} (wandb's {"value": ...} unwrapped), summary, files."""
    from wandb.proto import wandb_internal_pb2

    (log_path,) = glob.glob(os.path.join(run_dir, "run-*.wandb"))
    history: dict[int, dict[str, Any]] = {}
    config: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    for raw in _wandb_records(log_path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            row = {_item_key(i): json.loads(i.value_json) for i in record.history.item}
            history.setdefault(int(row.pop("_step", record.history.step.num)), {}).update(
                {k: v for k, v in row.items() if not k.startswith("_")})
        elif kind in ("run", "config"):  # the config given to init() rides on the run record
            updates = record.run.config.update if kind == "run" else record.config.update
            for item in updates:
                value = json.loads(item.value_json)
                config[_item_key(item)] = value["value"] if isinstance(value, dict) and "value" in value else value
        elif kind == "summary":
            for item in record.summary.update:
                summary[_item_key(item)] = json.loads(item.value_json)
    files_dir = os.path.join(run_dir, "files")
    files = sorted(os.path.relpath(p, files_dir) for p in glob.glob(os.path.join(files_dir, "**", "*"), recursive=True)
                   if os.path.isfile(p))
    return {"history": history, "config": config, "summary": summary, "files": files}
