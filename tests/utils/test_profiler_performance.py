"""Upstream's verl.utils.profiler.performance and verl.trainer.config.actor import paths, and FSDPActorConfig's
upstream dataclass default next to the trainer section's (which follows model.use_remove_padding)."""

from __future__ import annotations

import logging

import pytest

from verl.utils.profiler import performance


def test_memory_figures_are_zero_strings_on_cpu_and_the_unit_is_checked():
    assert performance._get_current_mem_info() == ("0.00", "0.00", "0.00", "0.00")
    assert performance._get_current_mem_info("MB", precision=1) == ("0.0", "0.0", "0.0", "0.0")
    with pytest.raises(ValueError, match="unit"):
        performance._get_current_mem_info("TB")


def test_the_memory_logger_wraps_and_logs_before_and_after(caplog):
    calls = []

    @performance.GPUMemoryLogger(role="actor", logger=logging.getLogger("perf-test"), level=logging.INFO)
    def update_actor(x):
        calls.append(x)
        return x + 1

    with caplog.at_level(logging.INFO, logger="perf-test"):
        assert update_actor(1) == 2
    assert calls == [1]
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("[actor] Before update_actor, memory allocated (GB): 0.00")
    assert lines[1].startswith("[actor] After update_actor")


def test_timers_are_verls_and_reduce_timing_is_the_identity_without_distributed():
    from verl.utils import timer

    assert performance.simple_timer is timer.simple_timer and performance.marked_timer is timer.marked_timer
    raw = {"gen": 1.5, "update": 2.0}
    assert performance.reduce_timing(raw) == raw and performance.reduce_timing(raw) is not raw


def test_upstreams_actor_config_path_and_default():
    from verl.trainer.config import PPOTrainerConfig
    from verl.trainer.config.actor import FSDPActorConfig
    from verl.workers.config import FSDPActorConfig as ours

    assert FSDPActorConfig is ours
    assert FSDPActorConfig().use_remove_padding is False  # upstream's dataclass default
    assert PPOTrainerConfig().actor_rollout_ref.actor.use_remove_padding is True  # the yaml's, via model's key
