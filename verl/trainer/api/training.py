"""`verl.train`: one call from Python to a finished run, through the CLI's own launcher (build_trainer /
run_training), raising the CLI's errors as exceptions: ConfigError (a key), DataCheckError (a row of the data),
ResumeRefused / CheckpointDirLocked (the run's folder), and whatever a callback or the run raised."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from omegaconf import OmegaConf

from verl.trainer.api.builder import ConfigLike, check, compose
from verl.trainer.api.callbacks import CallbackList, Recorder
from verl.trainer.api.datasets import DataLike, materialize
from verl.trainer.api.result import TrainResult
from verl.trainer.api.rewards import adapt_reward, plug_reward
from verl.trainer.config import PPOTrainerConfig


def train(config_or_overrides: ConfigLike = None, *, reward_fn: Any = None, train_data: DataLike = None,
          val_data: DataLike = None, callbacks: Any = None) -> TrainResult:
    """Train as `python -m verl.trainer.main_ppo` would with the same config; see docs/python_api.md.

    config_or_overrides: None, a list of 'key=value' strings, a dict (nested or dotted keys) or a
        PPOTrainerConfig (`verl.config(...)`).
    reward_fn: a per-sample or batched scoring function, or a list of functions / (function, weight) pairs;
        replaces custom_reward_function.path (giving both is refused).
    train_data / val_data: a parquet path (or list), a list of row dicts or a datasets.Dataset; replace
        data.train_files / data.val_files.
    callbacks: a Callback, an object with on_step_end / on_validation / on_checkpoint, a dict of functions by
        hook name, or a list of these.
    """
    cfg = compose(config_or_overrides)
    run_dir = OmegaConf.select(cfg, "trainer.default_local_dir")
    if train_data is not None:
        cfg.data.train_files = materialize(train_data, "train", run_dir)
    if val_data is not None:
        cfg.data.val_files = materialize(val_data, "val", run_dir)
    plan = None
    if reward_fn is not None:
        reward_kwargs = OmegaConf.to_container(cfg.custom_reward_function.reward_kwargs, resolve=True)
        plan = adapt_reward(reward_fn, reward_kwargs)
        plug_reward(cfg, plan)
    hooks = CallbackList(callbacks)  # a bad callback is refused before anything starts
    typed = check(cfg)
    return run_typed(typed, compute_score=plan.compute_score if plan else None, callbacks=hooks)


def run_typed(config: PPOTrainerConfig, compute_score: Callable[..., Any] | None = None,
              callbacks: CallbackList | None = None) -> TrainResult:
    """Run an already checked config (the CLI's path after its own check; train's after building)."""
    from verl.trainer.ppo.launcher import _report_dir, run_training

    hooks = callbacks if callbacks is not None else CallbackList()
    recorder = Recorder()
    hooks.append(recorder)
    import ray

    # a Ray this call starts ends with it, so a second verl.train in the same process gets the whole machine; a Ray
    # the caller started (ray.init, a cluster address) is left running
    owns_ray = not ray.is_initialized()
    try:
        summary = run_training(config, compute_score=compute_score, callbacks=hooks)
    finally:
        if owns_ray and ray.is_initialized():
            ray.shutdown()
    last_val = recorder.validations[-1][1] if recorder.validations else {}
    last_ckpt = recorder.checkpoints[-1][1] if recorder.checkpoints else None
    report_dir = _report_dir(config)
    return TrainResult(history=recorder.history, final_validation=last_val, validations=recorder.validations,
                       checkpoint_path=last_ckpt, report_dir=report_dir if os.path.isdir(report_dir) else None,
                       summary=dict(summary), finished=bool(summary.get("finished", False)))
