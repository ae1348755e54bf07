"""The reward-model worker with a vision-language reward model (a tiny Qwen2-VL trunk with a score head) on rows with
videos: scores equal a plain per-row forward at the last real token, padded and packed, and the videos change them."""

from __future__ import annotations

import copy
import os

import pytest
import torch

from tests.workers.actor.test_vlm_actor_video import MEDIA, video_batch
from tests.workers.reward_model.test_reward_model_worker import _config

FAMILY = "qwen2_vl"


def _vlm_rm_dir(folder: str) -> str:
    """The tiny video VLM's folder with a value model and a random score head saved in it."""
    from verl.checkpoint.hf_export import hf_config_of, save_hf_weights
    from verl.models.value_head import load_value_model
    from verl.models.vision_value_model import VisionLanguageValueModel

    model = load_value_model(folder, score_init_std=0.5).float()
    torch.nn.init.normal_(model.score.bias, std=0.5)
    config = hf_config_of(model)
    os.remove(os.path.join(folder, "model.safetensors"))
    save_hf_weights(VisionLanguageValueModel, config, model.state_dict(), folder)
    config.save_pretrained(folder)
    return folder


def _plain_scores(model, data, processor) -> torch.Tensor:
    scores = []
    for row in range(len(data)):
        model.model.rope_deltas = None
        mask = data.batch["attention_mask"][row].bool()
        ids = data.batch["input_ids"][row][mask][None]
        types = (ids == processor.image_token_id).int() + 2 * (ids == processor.video_token_id).int()
        inputs = data.non_tensor_batch["multi_modal_inputs"][row]
        out = model(input_ids=ids, mm_token_type_ids=types, **{k: torch.as_tensor(inputs[k]) for k in MEDIA
                                                               if k in inputs})
        scores.append(out.logits[0, -1, 0])
    return torch.stack(scores)


def _score(rank: int, port: int, folder: str, data, blank, results) -> None:
    import torch.distributed as dist

    from verl.workers.reward_model_worker import RewardModelWorker

    torch.set_num_threads(1)
    os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        for name, extra in {"padded": {"micro_batch_size_per_gpu": 2},
                            "packed": {"model.use_remove_padding": True, "micro_batch_size_per_gpu": 3}}.items():
            worker = RewardModelWorker(_config(folder, None, extra))
            worker.init_model()
            results[name] = worker.score(data)
            results[f"{name}_blank"] = worker.score(blank)
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(300)
def test_a_vision_language_reward_model_scores_the_videos(tmp_path):
    from tests.helpers.ranks import free_port, run_ranks
    from verl.models.value_head import load_reward_model

    data, processor = video_batch(tmp_path, FAMILY)
    folder = _vlm_rm_dir(str(tmp_path / FAMILY))
    blank = copy.deepcopy(data)
    for inputs in blank.non_tensor_batch["multi_modal_inputs"]:
        if "pixel_values_videos" in inputs:
            inputs["pixel_values_videos"] = torch.zeros_like(inputs["pixel_values_videos"])
    with torch.no_grad():
        expected = _plain_scores(load_reward_model(folder, "reward_model.model.path").float().eval(), data, processor)
    results = run_ranks(_score, free_port(), folder, data, blank, nprocs=1, timeout_s=280)
    for name in ("padded", "packed"):
        torch.testing.assert_close(results[name], expected, rtol=1e-4, atol=1e-4)
        assert (results[f"{name}_blank"] - expected).abs().max() > 1e-4  # the videos are scored
