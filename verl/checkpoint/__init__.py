"""Checkpoints: sharded per-role state (torch.distributed.checkpoint), atomic publication, integrity manifests.

The FSDP manager lives in `verl.checkpoint.fsdp_checkpoint_manager` (imported on use: it pulls in
torch.distributed.checkpoint); the on-disk layout and the tracker file in `verl.checkpoint.layout`.
"""

from verl.checkpoint.layout import (
    TRACKER_FILENAME,
    find_latest_ckpt_path,
    get_checkpoint_tracker_filename,
    read_tracker,
    write_tracker,
)
from verl.checkpoint.manifest import CheckpointIntegrityError

__all__ = [
    "TRACKER_FILENAME",
    "CheckpointIntegrityError",
    "find_latest_ckpt_path",
    "get_checkpoint_tracker_filename",
    "read_tracker",
    "write_tracker",
]
