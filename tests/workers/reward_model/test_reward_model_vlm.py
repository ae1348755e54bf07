"""The reward-model worker with a vision-language reward model (a tiny Qwen2-VL trunk with a trained-looking score
head): scores of image rows equal a plain per-row forward at the last real token, in the padded and packed paths,
and other images give other scores; a re-templating input tokenizer with images is refused."""

from __future__ import annotations

import copy
import os

import pytest
import torch

from tests.helpers.tiny_vlm import plain_row_inputs
from tests.workers.actor.test_vlm_actor import vlm_batch
from tests.workers.reward_model.test_reward_model_worker import _config

FAMILY = "qwen2_vl"


def _vlm_rm_dir(root) -> str:
    """The tiny VLM's folder (tokenizer, processor files) with a value model and a random score head saved in it."""
    from tests.helpers.tiny_vlm import save_tiny_vlm_dir
    from verl.checkpoint.hf_export import hf_config_of, save_hf_weights
    from verl.models.value_head import load_value_model
    from verl.models.vision_value_model import VisionLanguageValueModel

    folder = save_tiny_vlm_dir(root, FAMILY)
    model = load_value_model(folder, score_init_std=0.5).float()
    torch.nn.init.normal_(model.score.bias, std=0.5)
    config = hf_config_of(model)
    os.remove(os.path.join(folder, "model.safetensors"))
    save_hf_weights(VisionLanguageValueModel, config, model.state_dict(), folder)
    config.save_pretrained(folder)
    return folder


def _plain_scores(model, data) -> torch.Tensor:
    scores = []
    for row in range(len(data)):
        model.model.rope_deltas = None
        out = model(**plain_row_inputs(data, row, model.config.image_token_id))
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
        worker.input_tokenizer = worker.tokenizer  # as if the policy's tokenizer differed: re-templating
        try:
            worker.score(data)
        except ValueError as err:
            results["retemplate"] = str(err)
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(300)
def test_a_vision_language_reward_model_scores_the_images(tmp_path):
    from tests.helpers.ranks import free_port, run_ranks
    from verl.models.value_head import load_reward_model

    folder = _vlm_rm_dir(tmp_path / "rm")
    data = vlm_batch(tmp_path / "data", FAMILY)
    blank = copy.deepcopy(data)
    for inputs in blank.non_tensor_batch["multi_modal_inputs"]:
        if "pixel_values" in inputs:
            inputs["pixel_values"] = torch.zeros_like(inputs["pixel_values"])
    with torch.no_grad():
        expected = _plain_scores(load_reward_model(folder, "reward_model.model.path").float().eval(), data)
    results = run_ranks(_score, free_port(), folder, data, blank, nprocs=1, timeout_s=280)
    for name in ("padded", "packed"):
        torch.testing.assert_close(results[name], expected, rtol=1e-4, atol=1e-4)
        assert (results[f"{name}_blank"] - expected).abs().max() > 1e-4  # the images are scored
    assert "re-templating the chat as text would drop them" in results["retemplate"]
