"""A whole GRPO run with images: the bundled visual_count task (PIL-drawn shapes, examples/data_preprocess/
visual_count.py) on a tiny random Qwen2-VL, the HF rollout, one worker and two (with LoRA), through main_ppo's builder and Ray, in
both rollout modes (the agent loop, the default, and sync). A random model almost never writes the boxed count,
so this checks the wiring: the rows' images reach generation and the actor, two steps finish and log scores.
Also: what still does not run with images is refused before Ray, naming its key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.e2e import REPO, fit_run, tiny_run_overrides
from tests.helpers.tiny_vlm import save_tiny_vlm_dir

pytestmark = pytest.mark.e2e


def _visual_count_data(out: Path) -> Path:
    subprocess.run([sys.executable, str(REPO / "examples/data_preprocess/visual_count.py"), "--local_save_dir",
                    str(out), "--train_size", "16", "--test_size", "4", "--max_count", "3"],
                   check=True, capture_output=True)
    return out


def _overrides(tmp_path: Path, *extra: str, n_workers: int = 1) -> list[str]:
    model_dir = Path(save_tiny_vlm_dir(tmp_path / "model", "qwen2_vl"))
    data_dir = _visual_count_data(tmp_path / "data")
    return tiny_run_overrides(model_dir, data_dir, tmp_path / "run", adv_estimator="grpo", n_workers=n_workers) + [
        "actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.actor.freeze_vision_tower=false",
        "trainer.device=cpu", *extra]


# upstream's geo3k LoRA recipe: the language model's linears adapted, the vision tower left as loaded
LORA = ("actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=8",
        "actor_rollout_ref.model.target_modules=all-linear", "actor_rollout_ref.model.exclude_modules=.*visual.*")


SAVE = ("trainer.save_freq=2",)


@pytest.mark.parametrize(("mode", "n_workers", "extra"), [
    # CI keeps the two-worker LoRA run (it covers the single-worker one); make test-all runs the rest
    pytest.param("async", 1, (), marks=pytest.mark.slow), pytest.param("sync", 1, SAVE, marks=pytest.mark.slow),
    ("async", 2, LORA),
    pytest.param("async", 1, ("algorithm.adv_estimator=gae",), marks=pytest.mark.slow),  # the critic sees images
], ids=["async", "sync", "async-2workers-lora", "async-gae"])
def test_grpo_on_images_runs_two_steps_and_logs_scores(tmp_path: Path, mode: str, n_workers: int, extra) -> None:
    rows = fit_run(_overrides(tmp_path, f"actor_rollout_ref.rollout.mode={mode}", *extra, n_workers=n_workers))
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert "critic/score/mean" in row and 0.0 <= row["critic/score/mean"] <= 1.0
        assert row["response_length/mean"] > 0
    if extra == SAVE:
        _merged_checkpoint_loads_as_the_vlm(tmp_path)


def _merged_checkpoint_loads_as_the_vlm(tmp_path: Path) -> None:
    """The model merger turns the step-2 checkpoint into a folder that loads as a VLM with its processor."""
    from transformers import AutoModelForImageTextToText

    from verl.model_merger.__main__ import main as merge
    from verl.models.loader import load_tokenizer
    from verl.models.processor import load_processor

    target = tmp_path / "merged"
    merge(["merge", "--backend", "fsdp", "--local_dir", str(tmp_path / "run/global_step_2/actor"),
           "--target_dir", str(target)])
    model = AutoModelForImageTextToText.from_pretrained(target)
    processor = load_processor(str(target), load_tokenizer(str(target), "merged"), "merged")
    assert type(model).__name__ == "Qwen2VLForConditionalGeneration"
    assert type(processor).__name__ == "Qwen2VLProcessor" and processor.image_processor.merge_size == 2


def test_settings_that_ignore_images_are_refused_before_ray(tmp_path: Path) -> None:
    import ray

    from tests.helpers.e2e import default_tokenizer_dir
    from verl.trainer.config import validate_config
    from verl.trainer.config.validate import load_config
    from verl.trainer.ppo.launcher import build_trainer

    overrides = _overrides(tmp_path, "data.return_multi_modal_inputs=false", "reward_model.enable=true",
                           f"reward_model.model.path={default_tokenizer_dir()}")  # a text-only reward model
    with pytest.raises(NotImplementedError) as err:
        build_trainer(validate_config(load_config(overrides)))
    message = str(err.value)
    assert "data.return_multi_modal_inputs=false" in message and "is a text-only model" in message
    assert "column 'images', data.image_key" in message
    assert not ray.is_initialized()
