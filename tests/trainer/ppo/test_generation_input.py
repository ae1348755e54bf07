"""What the trainer sends the rollout: the prompt tensors (moved out of the batch), every column in async mode, and
in sync mode only a vision row's images (kept in the batch too, for the actor's forward)."""

import numpy as np
import torch

from verl.protocol import DataProto
from verl.trainer.ppo.agent_rollout import pop_generation_input


def _batch() -> DataProto:
    images = np.empty(2, dtype=object)
    images[:] = [{"pixel_values": torch.ones(4, 3), "image_grid_thw": torch.tensor([[1, 2, 2]])}, {}]
    return DataProto.from_dict(
        tensors={"input_ids": torch.ones(2, 3, dtype=torch.long), "attention_mask": torch.ones(2, 3, dtype=torch.long),
                 "position_ids": torch.zeros(2, 4, 3, dtype=torch.long)},
        non_tensors={"multi_modal_inputs": images, "data_source": np.array(["a", "b"], dtype=object)})


def test_sync_sends_the_images_only_and_keeps_them_in_the_batch():
    batch = _batch()
    gen = pop_generation_input(batch, "sync")
    assert set(gen.batch.keys()) == {"input_ids", "attention_mask", "position_ids"}
    assert set(gen.non_tensor_batch) == {"multi_modal_inputs"}
    assert "multi_modal_inputs" in batch.non_tensor_batch and "input_ids" not in batch.batch.keys()


def test_async_sends_every_column_and_a_text_batch_sends_none_in_sync():
    assert set(pop_generation_input(_batch(), "async").non_tensor_batch) == {"multi_modal_inputs", "data_source"}
    text = _batch()
    text.non_tensor_batch.pop("multi_modal_inputs")
    assert pop_generation_input(text, "sync").non_tensor_batch == {}
