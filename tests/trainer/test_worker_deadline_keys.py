"""main_generation's and the SFT trainer's Ray workers get the driver's deadlines from their trainer sections, as
main_ppo's do (tests/trainer/ppo/test_worker_failures.py); what a deadline does is tests/single_controller/test_deadlines.py."""

from __future__ import annotations

import pytest

from verl.single_controller.base.deadlines import WorkerDeadlines


class _Stop(Exception):
    pass


def _capture_group(monkeypatch) -> dict:
    """Replace Ray's pool and group with recorders; the group's construction ends the launch."""
    from verl.single_controller import ray as ray_pkg
    from verl.utils import ray_utils

    seen: dict = {}

    def fake_group(**kwargs):
        seen.update(kwargs)
        raise _Stop

    monkeypatch.setattr(ray_utils, "init_ray", lambda *args, **kwargs: None)
    monkeypatch.setattr(ray_pkg, "RayResourcePool", lambda **kwargs: object())
    monkeypatch.setattr(ray_pkg, "RayWorkerGroup", fake_group)
    return seen


def _data(tmp_path) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "prompts.parquet"
    pq.write_table(pa.table({"prompt": [[{"role": "user", "content": "1 + 1?"}]]}), path)
    return {"path": str(path), "output_path": str(tmp_path / "out.parquet")}


def test_generation_workers_get_the_trainer_sections_deadlines(monkeypatch, tmp_path):
    from verl.trainer.generation_runner import _RayWorkers
    from verl.trainer.main_generation import validate_generation_config

    seen = _capture_group(monkeypatch)
    config = validate_generation_config({
        "trainer": {"n_gpus_per_node": 2, "ray_wait_register_center_timeout": 45, "worker_call_timeout_s": 120.0,
                    "worker_call_timeout_per_sample_s": 2.0},
        "data": _data(tmp_path)})
    with pytest.raises(_Stop):
        _RayWorkers(config, str(tmp_path))
    deadlines = seen["deadlines"]
    assert deadlines == WorkerDeadlines(startup_s=45.0, call_s=120.0, per_sample_s=2.0)
    assert deadlines.for_call("init_model") == 45.0
    assert deadlines.for_call("generate_sequences", samples=10) == 140.0  # 120 + 10 x 2


def test_generation_deadlines_default_and_null(monkeypatch, tmp_path):
    from verl.trainer.generation_runner import _RayWorkers
    from verl.trainer.main_generation import validate_generation_config

    seen = _capture_group(monkeypatch)
    config = validate_generation_config({"trainer": {"n_gpus_per_node": 2, "worker_call_timeout_s": None},
                                         "data": _data(tmp_path)})
    with pytest.raises(_Stop):
        _RayWorkers(config, str(tmp_path))
    assert seen["deadlines"].for_call("init_model") == 300.0
    assert seen["deadlines"].for_call("generate_sequences", samples=10) is None  # null: no call deadline


def test_generation_deadline_keys_are_checked():
    from verl.trainer.config import ConfigError
    from verl.trainer.main_generation import validate_generation_config

    with pytest.raises(ConfigError, match="trainer.worker_call_timeout_s"):
        validate_generation_config({"trainer": {"worker_call_timeout_s": 0.1}})


def test_sft_ray_workers_get_the_start_up_deadline_and_no_call_deadline(monkeypatch, tmp_path):
    from verl.trainer.sft.config import validate_sft_config
    from verl.trainer.sft.ray_launch import run_sft_on_ray

    seen = _capture_group(monkeypatch)
    config = validate_sft_config({"trainer": {"n_gpus_per_node": 2, "default_local_dir": str(tmp_path),
                                              "ray_wait_register_center_timeout": 60}},
                                 world_size=2, check_files=False)
    with pytest.raises(_Stop):
        run_sft_on_ray(config)
    deadlines = seen["deadlines"]
    assert deadlines.for_call("__init__") == 60.0
    assert deadlines.for_call("fit") is None  # one call for the whole run: collectives' own timeout covers it
