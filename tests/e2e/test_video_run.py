"""main_ppo with videos (data.video_key) on the bundled video_count rows and a tiny random Qwen2.5-VL / Qwen2-VL:
the checks before Ray pass with the HF rollout and stop the settings videos are not built for; two steps train
through Ray with the HF rollout (GRPO through the agent loop, PPO with a critic through the sync rollout)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.e2e import REPO, fit_run, tiny_run_overrides

pytestmark = pytest.mark.e2e

ARR = "actor_rollout_ref"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("video_count")
    subprocess.run([sys.executable, str(REPO / "examples/data_preprocess/video_count.py"), "--local_save_dir",
                    str(data), "--train_size", "8", "--test_size", "4", "--max_count", "3", "--video_size", "24",
                    "--frames_per_shape", "2"], check=True, capture_output=True)
    return data


def _overrides(model: Path, data: Path, run_dir: Path, *extra: str) -> list[str]:
    return tiny_run_overrides(model, data, run_dir, n_workers=1) + [
        "trainer.device=cpu", f"{ARR}.actor.fsdp_config.mixed_precision.param_dtype=fp32",
        "data.max_prompt_length=128", "data.max_response_length=8", "data.video_key=videos",
        f"{ARR}.rollout.name=hf", f"{ARR}.model.use_remove_padding=True", *extra]


def test_the_bundled_rows_hold_readable_videos(data_dir: Path) -> None:
    import pyarrow.parquet as pq

    rows = pq.read_table(data_dir / "train.parquet").to_pylist()
    assert len(rows) == 8 and all(r["prompt"][0]["content"].startswith("<video>") for r in rows)
    for row in rows:
        assert Path(row["videos"][0]["video"]).is_file() and row["videos"][0]["fps"] == 2.0
        assert 1 <= int(row["reward_model"]["ground_truth"]) <= 3


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen2_vl", "qwen3_vl"])
def test_checks_before_ray_pass_for_hf_and_refuse_unbuilt_settings(tmp_path: Path, data_dir: Path, family: str,
                                                                   monkeypatch) -> None:
    import ray

    import verl.utils.ray_utils
    from tests.helpers.tiny_video import save_tiny_video_vlm_dir
    from verl.trainer.config import validate_config
    from verl.trainer.config.validate import load_config
    from verl.trainer.ppo.launcher import build_trainer

    class ReachedRay(Exception):
        pass

    def stop(*args, **kwargs):
        raise ReachedRay

    monkeypatch.setattr(verl.utils.ray_utils, "init_ray", stop)
    model = Path(save_tiny_video_vlm_dir(tmp_path / "model", family))
    for mode in ("async", "sync"):
        with pytest.raises(ReachedRay):
            build_trainer(validate_config(load_config(_overrides(model, data_dir, tmp_path / mode,
                                                                 f"{ARR}.rollout.mode={mode}"))))
    with pytest.raises(NotImplementedError) as info:
        build_trainer(validate_config(load_config(_overrides(model, data_dir, tmp_path / "vllm",
                                                             f"{ARR}.rollout.name=vllm"))))
    assert f"{ARR}.rollout.name=vllm with videos (data.video_key)" in str(info.value)
    assert not ray.is_initialized()


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("mode", "estimator"), [("async", "grpo"), ("sync", "gae")])
def test_two_steps_with_videos(tmp_path: Path, data_dir: Path, mode: str, estimator: str) -> None:
    """GRPO through the agent loop; PPO with a critic (values with the videos) through the sync rollout."""
    from tests.helpers.tiny_video import save_tiny_video_vlm_dir

    model = Path(save_tiny_video_vlm_dir(tmp_path / "model", "qwen2_5_vl"))
    rows = fit_run(_overrides(model, data_dir, tmp_path / "run", f"{ARR}.rollout.mode={mode}",
                              f"algorithm.adv_estimator={estimator}", "critic.model.use_remove_padding=True"))
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert 0.0 <= row["critic/score/mean"] <= 1.0 and row["response_length/mean"] > 0
        assert ("critic/vf_loss" in row) == (estimator == "gae")
