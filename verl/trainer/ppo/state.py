"""TrainerState: everything the driver itself contributes to a checkpoint, saved and loaded as one object.

On disk (unchanged format): `data.pt` holds the StatefulDataLoader's state, `trainer_state.pt` the rest as a
plain dict, so both load with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

import torch

from verl.checkpoint.atomic import atomic_torch_save
from verl.checkpoint.rng import get_rng_state, set_rng_state

DATA_FILE = "data.pt"
TRAINER_STATE_FILE = "trainer_state.pt"


@dataclass
class TrainerState:
    global_steps: int
    dataloader: dict[str, Any]  # StatefulDataLoader.state_dict(): the position in the epoch and the sampler's RNG
    kl_ctrl: dict[str, float] | None  # the in-reward KL controller's attributes (its adaptive value)
    rng: dict[str, Any]  # the driver's torch/numpy/random state
    # the batch geometry the saved data position only makes sense with
    train_batch_size: int
    dataset_len: int
    world_size: int
    total_training_steps: int
    # prompts per dataloader batch (data.gen_batch_size, resolved); None in checkpoints written before it was saved
    gen_batch_size: int | None = None

    @classmethod
    def capture(cls, **fields: Any) -> TrainerState:
        """The state now, with this process's RNG state."""
        return cls(rng=get_rng_state(), **fields)

    def save(self, folder: str) -> None:
        atomic_torch_save(self.dataloader, os.path.join(folder, DATA_FILE))
        rest = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "dataloader"}
        atomic_torch_save(rest, os.path.join(folder, TRAINER_STATE_FILE))

    @classmethod
    def load(cls, folder: str) -> TrainerState:
        rest = torch.load(os.path.join(folder, TRAINER_STATE_FILE), weights_only=True)
        dataloader = torch.load(os.path.join(folder, DATA_FILE), weights_only=True)
        return cls(dataloader=dataloader, **rest)

    def restore_rng(self) -> None:
        set_rng_state(self.rng)
