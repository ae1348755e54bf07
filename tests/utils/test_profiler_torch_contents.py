"""``tool_config.torch.contents`` and ``tool_config.torch.discrete`` (upstream v0.7): what a torch trace holds, and
one trace per annotated stage instead of one per profiled step (verl.utils.profiler.torch_profile)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from tests.utils.test_profiler_torch import _Worker as TracedWorker
from verl.trainer.config.validate import load_config, validate_config
from verl.utils.config_errors import ConfigError
from verl.utils.profiler import ProfilerConfig, ProfilerToolConfig, TorchProfilerToolConfig
from verl.utils.profiler.torch_profile import stage_trace_path, trace_path

ARR = "actor_rollout_ref"
TORCH_STEP1 = ["global_profiler.tool=torch", "global_profiler.steps=[1]", f"{ARR}.actor.profiler.enable=true"]


def _Worker(config: ProfilerConfig) -> TracedWorker:  # noqa: N802 - stands in for the worker class
    return TracedWorker("actor_rollout", config)


def _cfg(tmp_path: Path, **torch_kwargs) -> ProfilerConfig:
    tools = ProfilerToolConfig(torch=TorchProfilerToolConfig(**torch_kwargs))
    return ProfilerConfig(tool="torch", enable=True, save_path=str(tmp_path), tool_config=tools)


def _events(path: str) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


def _run_step(worker: _Worker, step: int) -> None:
    x = torch.randn(4, 8)
    worker.profiler.start(profile_step=step)
    worker.generate_sequences(x)
    worker.generate_sequences(x)
    worker.update_actor(x)
    worker.profiler.stop()


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.json.gz"))


@pytest.mark.parametrize(("contents", "shapes", "memory", "stack"), [
    ([], False, False, False),
    (["cpu"], False, False, False),
    (["cpu", "shapes"], True, False, False),
    (["memory"], False, True, False),
    (["stack"], False, False, True),
])
def test_contents_choose_what_the_trace_holds(tmp_path, contents, shapes, memory, stack):
    worker = _Worker(_cfg(tmp_path, contents=contents))
    _run_step(worker, 1)
    events = _events(trace_path(str(tmp_path), 1, "actor_rollout", 0))
    names = {e.get("name") for e in events}
    assert {"actor_rollout/generate_sequences", "actor_rollout/update_actor", "gen_body"} <= names
    assert any(str(n).startswith("aten::") for n in names)  # cpu activity: recorded with or without "cpu"
    assert any("Input Dims" in (e.get("args") or {}) for e in events) is shapes  # record_shapes
    assert any(e.get("name") == "[memory]" for e in events) is memory  # profile_memory: allocation events
    assert any(e.get("cat") == "python_function" for e in events) is stack  # with_stack: the Python frames


def test_unknown_contents_and_cuda_without_a_gpu_are_refused(tmp_path):
    with pytest.raises(AssertionError, match="only supports"):
        TorchProfilerToolConfig(contents=["npu"])
    with pytest.raises(ValueError, match="records each stage whole"):  # a window narrows the per-step trace only
        _Worker(_cfg(tmp_path, discrete=True, step_start=1))
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: contents=['cuda'] records")
    with pytest.raises(ValueError, match="no CUDA GPU"):
        _Worker(_cfg(tmp_path, contents=["cuda"]))
    with pytest.raises(ConfigError) as info:  # before Ray
        validate_config(load_config([*TORCH_STEP1, f"{ARR}.actor.profiler.tool_config.torch.contents=[cuda]"]),
                        check_files=False)
    assert f"{ARR}.actor.profiler.tool_config.torch.contents=['cuda'] names 'cuda'" in str(info.value)


def test_discrete_writes_one_trace_per_stage_instead_of_one_per_step(tmp_path):
    continuous, discrete = tmp_path / "continuous", tmp_path / "discrete"
    _run_step(_Worker(_cfg(continuous)), 2)
    assert _files(continuous) == ["2/actor_rollout/prof_rank-0.json.gz"]
    _run_step(_Worker(_cfg(discrete, discrete=True)), 2)
    assert _files(discrete) == ["2/actor_rollout/generate_sequences/prof_rank-0.json.gz",
                                "2/actor_rollout/generate_sequences/prof_rank-0_1.json.gz",
                                "2/actor_rollout/update_actor/prof_rank-0.json.gz"]
    root = str(discrete)
    gen = {e.get("name") for e in _events(stage_trace_path(root, 2, "actor_rollout", 0, "generate_sequences", 1))}
    upd = {e.get("name") for e in _events(stage_trace_path(root, 2, "actor_rollout", 0, "update_actor"))}
    assert "actor_rollout/generate_sequences" in gen and "gen_body" in gen and "mini_batch_0" not in gen
    assert "actor_rollout/update_actor" in upd and "mini_batch_0" in upd and "gen_body" not in upd
    # outside a profiled step a discrete profiler records nothing more
    worker = _Worker(_cfg(tmp_path / "idle", discrete=True))
    worker.generate_sequences(torch.ones(1, 8))
    assert not (tmp_path / "idle").exists()


def test_the_rollout_follows_the_actors_torch_options_and_mismatches_are_refused():
    config = validate_config(load_config([*TORCH_STEP1, f"{ARR}.actor.profiler.tool_config.torch.contents=[shapes]",
                                          f"{ARR}.actor.profiler.tool_config.torch.discrete=true"]),
                             check_files=False)
    rollout = config.actor_rollout_ref.rollout.profiler.tool_config
    assert rollout.torch.contents == ["shapes"] and rollout.torch.discrete is True
    assert config.actor_rollout_ref.ref.profiler.tool_config.torch.contents == []  # the ref's own section
    with pytest.raises(ConfigError) as info:
        validate_config(load_config([*TORCH_STEP1, "critic.profiler.enable=true", "algorithm.adv_estimator=gae",
                                     "critic.profiler.tool_config.torch.discrete=true"]), check_files=False)
    assert "must ask for the same discrete" in str(info.value)
    with pytest.raises(ConfigError) as info:
        validate_config(load_config([*TORCH_STEP1, f"{ARR}.actor.profiler.tool_config.torch.discrete=true",
                                     f"{ARR}.actor.profiler.tool_config.torch.step_start=1"]), check_files=False)
    assert "discrete=true records each stage whole" in str(info.value)
