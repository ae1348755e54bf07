"""The rollout interface: prompts in, prompt+response batch out.

Backends (HF generate, vLLM) plug in behind it. The weight-sync hooks are no-ops for backends that sample from
the training module itself; an engine holding its own copy of the weights overrides them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable

import torch

from verl.protocol import DataProto

__all__ = ["BaseRollout"]


class BaseRollout(ABC):
    @abstractmethod
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Generate one response per prompt row (the trainer repeats prompts ``rollout.n`` times first).

        Input batch: ``input_ids`` (left-padded), ``attention_mask``, ``position_ids``; meta_info
        ``eos_token_id``, ``pad_token_id``, optional ``do_sample``, ``validate``.
        Output batch: ``prompts``, ``responses`` (bs, response_length), ``input_ids``, ``attention_mask``,
        ``position_ids``, ``response_mask``.
        """

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load new policy weights (HF parameter names) into the engine; no-op when sampling from the module."""
        return None

    def sleep(self) -> None:
        """Free engine memory (KV cache, weights) between rollouts; no-op by default."""
        return None

    def wake_up(self) -> None:
        """Re-acquire what ``sleep`` freed before the next rollout; no-op by default."""
        return None
