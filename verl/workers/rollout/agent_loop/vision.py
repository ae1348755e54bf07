"""The agent loop's batch for vision-language rows: (bs, 4, P + R) position ids, as the sync rollout makes them.

The actor recomputes log-probs from the trainer's batch, whose ``multi_modal_inputs`` (pixel_values, image_grid_thw)
are the dataset's. So a trajectory must carry exactly its row's images, and its prompt's 3-D (mrope) positions
come from those images' grids; the response continues every axis by 1, 2, ... (``response_position_ids``).
Images a loop adds during a trajectory (a tool's image) are not built: the actor would never see them.
"""

from __future__ import annotations

from typing import Any

import torch

from verl.data.vision import response_position_ids, vision_position_ids
from verl.protocol import DataProto
from verl.workers.rollout.agent_loop.base import AgentLoopOutput

__all__ = ["vision_positions"]


def _row_grid(prompts: DataProto, index: int) -> torch.Tensor | None:
    column = prompts.non_tensor_batch.get("multi_modal_inputs")
    inputs = column[index] if column is not None else None
    grid = inputs.get("image_grid_thw") if inputs else None
    return None if grid is None else torch.as_tensor(grid).reshape(-1, 3)


def _row_image_count(prompts: DataProto, index: int) -> int:
    column = prompts.non_tensor_batch.get("multi_modal_data")
    data = column[index] if column is not None else None
    return len((data or {}).get("image") or [])


def vision_positions(batch: DataProto, outputs: list[AgentLoopOutput], prompts: DataProto, processor: Any) -> None:
    """Give ``batch`` (outputs_to_batch's) the 3-D position ids of a VLM batch: done in place, only when the
    prompts' own position ids are (bs, 4, P). Raises when a trajectory's images are not its row's."""
    if prompts.batch["position_ids"].dim() != 3:
        return
    image_token_id = getattr(processor, "image_token_id", None)
    merge = int(getattr(getattr(processor, "image_processor", None), "merge_size", 0) or 0)
    if image_token_id is None or not merge:
        raise ValueError("the agent loop got vision-language prompts ((bs, 4, L) position ids) but the rollout has no "
                         "Qwen-VL processor; actor_rollout_ref.model.path must be the vision-language model folder")
    prompt_length = batch.batch["prompts"].size(1)
    response_length = batch.batch["responses"].size(1)
    rows = []
    for i, output in enumerate(outputs):
        images = len((output.multi_modal_data or {}).get("image") or [])
        expected = _row_image_count(prompts, i)
        if images != expected:
            raise NotImplementedError(
                f"agent loop output {i}: the trajectory carries {images} images but its row has {expected}; an agent "
                "loop must send its row's images (image_data) and add none (images from tools are not built). The "
                "single_turn_agent loop does this; tool and interaction loops do not take images yet.")
        prompt_mask = batch.batch["attention_mask"][i, :prompt_length]
        prompt = vision_position_ids(batch.batch["prompts"][i], prompt_mask, _row_grid(prompts, i),
                                     int(image_token_id), merge)
        rows.append(torch.cat([prompt, response_position_ids(prompt[None], response_length)[0]], dim=-1))
    batch.batch["position_ids"] = torch.stack(rows)
