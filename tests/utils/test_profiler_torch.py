"""global_profiler.tool=torch on one process and one rank: a worker-like object's annotated calls, started and
stopped as the trainer does, leave a chrome trace of that work under save_path (verl.utils.profiler)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from verl.utils.profiler import DistProfiler, ProfilerConfig, ProfilerToolConfig, TorchProfilerToolConfig
from verl.utils.profiler.torch_profile import trace_path


class _Worker:
    """Stands in for an FSDP worker: a model, an optimizer, annotated methods."""

    def __init__(self, role: str, config: ProfilerConfig, rank: int = 0) -> None:
        self.profiler = DistProfiler(rank=rank, config=config, role=role)
        self.model = torch.nn.Linear(8, 8)
        self.actor_optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

    @DistProfiler.annotate()
    def generate_sequences(self, x: torch.Tensor) -> torch.Tensor:
        with torch.profiler.record_function("gen_body"):
            return self.model(x)

    @DistProfiler.annotate(optimizer_attr="actor_optimizer")
    def update_actor(self, x: torch.Tensor, mini_batches: int = 3, tag: str = "") -> float:
        for i in range(mini_batches):
            with torch.profiler.record_function(f"{tag}mini_batch_{i}"):
                self.actor_optimizer.zero_grad()
                loss = self.model(x).pow(2).mean()
                loss.backward()
                self.actor_optimizer.step()
        return float(loss.detach())


def _cfg(tmp_path: Path, **kwargs) -> ProfilerConfig:
    return ProfilerConfig(**{"tool": "torch", "enable": True, "save_path": str(tmp_path), **kwargs})


def _names(path: str) -> set[str]:
    with gzip.open(path, "rt") as f:
        return {e.get("name") for e in json.load(f)["traceEvents"]}


def _step(worker: _Worker, step: int, *others: _Worker) -> None:
    x = torch.randn(4, 8)
    for w in (worker, *others):
        w.profiler.start(profile_step=step)
    worker.generate_sequences(x)
    for w in others:
        w.generate_sequences(x)
    worker.update_actor(x)
    for w in (worker, *others):
        w.profiler.stop()


def test_a_profiled_step_writes_the_roles_trace_with_its_calls(tmp_path):
    worker = _Worker("actor_rollout", _cfg(tmp_path))
    _step(worker, 3)
    path = trace_path(str(tmp_path), 3, "actor_rollout", 0)
    assert path == str(tmp_path / "3" / "actor_rollout" / "prof_rank-0.json.gz")
    names = _names(path)
    assert {"actor_rollout/generate_sequences", "actor_rollout/update_actor", "gen_body", "mini_batch_0",
            "mini_batch_2"} <= names
    assert any(n and n.startswith("aten::") for n in names)  # the ops themselves are recorded
    # outside a profiled step the annotated methods run as before and nothing more is written
    out = worker.generate_sequences(torch.ones(1, 8))
    assert out.shape == (1, 8)
    assert [p.name for p in tmp_path.iterdir()] == ["3"]


@pytest.mark.parametrize(("kwargs", "rank", "recorded"), [
    ({}, 0, True),  # no ranks given: rank 0, as upstream
    ({}, 1, False),
    ({"ranks": [1]}, 1, True),
    ({"ranks": [1]}, 0, False),
    ({"all_ranks": True}, 5, True),
    ({"enable": False}, 0, False),
    ({"tool": None}, 0, False),
])
def test_enable_all_ranks_and_ranks_choose_the_ranks_that_record(tmp_path, kwargs, rank, recorded):
    worker = _Worker("critic", _cfg(tmp_path, **kwargs), rank=rank)
    _step(worker, 1)
    assert Path(trace_path(str(tmp_path), 1, "critic", rank)).is_file() is recorded
    assert worker.profiler.check_this_rank() is recorded


def test_roles_of_one_process_share_the_trace_and_each_gets_its_copy(tmp_path):
    actor = _Worker("actor_rollout", _cfg(tmp_path))
    critic = _Worker("critic", _cfg(tmp_path / "critic_dir"))
    _step(actor, 2, critic)
    for root, role in ((tmp_path, "actor_rollout"), (tmp_path / "critic_dir", "critic")):
        names = _names(trace_path(str(root), 2, role, 0))
        assert {"actor_rollout/generate_sequences", "critic/generate_sequences"} <= names


def test_a_role_without_the_profiler_is_still_named_inside_anothers_trace(tmp_path):
    actor = _Worker("actor_rollout", _cfg(tmp_path))
    ref = _Worker("ref", ProfilerConfig())  # the defaults: no tool, not enabled
    _step(actor, 1, ref)
    assert "ref/generate_sequences" in _names(trace_path(str(tmp_path), 1, "actor_rollout", 0))
    assert not (tmp_path / "1" / "ref").exists()


def test_step_start_and_step_end_keep_only_those_optimizer_steps_of_the_update(tmp_path):
    window = ProfilerToolConfig(torch=TorchProfilerToolConfig(step_start=1, step_end=2))
    worker = _Worker("actor_rollout", _cfg(tmp_path, tool_config=window))
    _step(worker, 1)
    names = _names(trace_path(str(tmp_path), 1, "actor_rollout", 0))
    assert "mini_batch_1" in names
    assert not {"mini_batch_0", "mini_batch_2", "gen_body"} & names


def test_an_open_ended_window_records_from_step_start_to_the_end(tmp_path):
    window = ProfilerToolConfig(torch=TorchProfilerToolConfig(step_start=2, step_end=None))
    worker = _Worker("actor_rollout", _cfg(tmp_path, tool_config=window))
    _step(worker, 1)
    names = _names(trace_path(str(tmp_path), 1, "actor_rollout", 0))
    assert "mini_batch_2" in names and not {"mini_batch_0", "mini_batch_1", "gen_body"} & names


def test_the_window_counts_optimizer_steps_across_the_update_calls_of_the_trace(tmp_path):
    window = ProfilerToolConfig(torch=TorchProfilerToolConfig(step_start=2, step_end=3))
    worker = _Worker("actor_rollout", _cfg(tmp_path, tool_config=window))
    x = torch.randn(4, 8)
    worker.profiler.start(profile_step=1)
    worker.update_actor(x, mini_batches=2, tag="first_")  # optimizer steps 0, 1
    worker.update_actor(x, mini_batches=2, tag="second_")  # optimizer steps 2, 3
    worker.profiler.stop()
    names = _names(trace_path(str(tmp_path), 1, "actor_rollout", 0))
    assert "second_mini_batch_0" in names
    assert not {"first_mini_batch_0", "first_mini_batch_1", "second_mini_batch_1"} & names


def test_the_window_is_checked_when_built():
    with pytest.raises(ValueError, match="step_end"):
        TorchProfilerToolConfig(step_start=2, step_end=2)
    with pytest.raises(ValueError, match="step_start"):
        TorchProfilerToolConfig(step_start=-1)


def test_nsys_and_npu_are_not_built():
    for tool in ("nsys", "npu"):
        with pytest.raises(ValueError, match="not built"):
            DistProfiler(rank=0, config=ProfilerConfig(tool=tool, enable=True))
