"""global_profiler.tool=torch_memory: the CUDA allocator history recorded from start_profile, a snapshot dumped at
stop_profile. No CUDA here, so torch.cuda.memory's two calls are replaced by recorders; what reaches them is the
effect of the config keys."""

from __future__ import annotations

import pytest
import torch

from verl.utils.profiler import (
    DistProfiler,
    GlobalToolConfig,
    GlobalTorchMemoryConfig,
    ProfilerConfig,
    ProfilerToolConfig,
    TorchMemoryToolConfig,
)


@pytest.fixture
def cuda_calls(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", lambda **kw: calls.append(("record", kw)))

    def dump(path):
        calls.append(("dump", path))
        open(path, "wb").close()

    monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot", dump)
    return calls


def test_the_roles_and_the_global_keys_reach_the_allocator_history(tmp_path, cuda_calls):
    config = ProfilerConfig(tool="torch_memory", enable=True, save_path=str(tmp_path),
                            tool_config=ProfilerToolConfig(torch_memory=TorchMemoryToolConfig(
                                trace_alloc_max_entries=777)))
    gtc = GlobalToolConfig(torch_memory=GlobalTorchMemoryConfig(context="alloc", stacks="python",
                                                                kw_args={"clear_history": True}))
    profiler = DistProfiler(rank=0, config=config, role="actor_rollout", global_tool_config=gtc)
    profiler.start(profile_step=4)
    profiler.stop()
    path = tmp_path / "4" / "actor_rollout" / "memory_snapshot_rank-0.pickle"
    assert cuda_calls == [
        ("record", {"enabled": "all", "context": "alloc", "stacks": "python", "max_entries": 777,
                    "clear_history": True}),
        ("dump", str(path)),
        ("record", {"enabled": None}),
    ]
    assert path.is_file()


def test_a_rank_not_chosen_records_nothing(tmp_path, cuda_calls):
    config = ProfilerConfig(tool="torch_memory", enable=True, ranks=[1], save_path=str(tmp_path))
    profiler = DistProfiler(rank=0, config=config, role="critic")
    profiler.start(profile_step=1)
    profiler.stop()
    assert cuda_calls == [] and not any(tmp_path.iterdir())
