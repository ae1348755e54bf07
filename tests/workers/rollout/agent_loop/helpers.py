"""Shared pieces for agent-loop tests: typed configs, an HF-backed manager on a tiny model, row batches."""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.helpers.tiny_model import EOS_ID, PAD_ID, left_padded_prompts
from tests.helpers.typed_config import typed_section
from verl.protocol import DataProto
from verl.trainer.config import ActorRolloutRefConfig
from verl.workers.rollout import HFRollout
from verl.workers.rollout.agent_loop.backends import HFBackend
from verl.workers.rollout.agent_loop.manager import AgentLoopManager

PROMPT_LEN = 6
RESPONSE_LEN = 8


def arr_config(**overrides: Any) -> ActorRolloutRefConfig:
    values = {
        "model.path": "unused", "rollout.mode": "async", "rollout.name": "hf",
        "rollout.prompt_length": PROMPT_LEN, "rollout.response_length": RESPONSE_LEN,
        "rollout.val_kwargs.temperature": 0.0, "rollout.val_kwargs.do_sample": False,
    }
    return typed_section(ActorRolloutRefConfig, values, **overrides)


def hf_manager(model, config: ActorRolloutRefConfig, tokenizer: Any = None) -> AgentLoopManager:
    rollout = HFRollout(model, config.rollout)
    return AgentLoopManager(config, tokenizer, lambda meta: HFBackend(rollout, meta, config.rollout.prompt_length))


def prompt_batch(lengths=(6, 3, 5, 1), seed=4, eos=EOS_ID, columns: dict[str, list] | None = None, **meta) -> DataProto:
    ids, mask, pos = left_padded_prompts(list(lengths), PROMPT_LEN, seed=seed)
    info = {"eos_token_id": eos, "pad_token_id": PAD_ID}
    info.update(meta)
    non_tensors = {k: np.array(v, dtype=object) for k, v in (columns or {}).items()}
    return DataProto.from_dict({"input_ids": ids, "attention_mask": mask, "position_ids": pos},
                               non_tensors=non_tensors, meta_info=info)
