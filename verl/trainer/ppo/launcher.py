"""From a validated config to a finished run: Ray, tokenizer, data, rewards, roles -> pools, fit, report."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from typing import Any

from verl.trainer.config import PPOTrainerConfig
from verl.trainer.ppo.typed import as_typed


def _run_dir(config: PPOTrainerConfig) -> str:
    return os.path.abspath(os.path.expanduser(config.trainer.default_local_dir))


def _report_dir(config: PPOTrainerConfig) -> str:
    return os.path.abspath(os.path.expanduser(config.trainer.report_dir or os.path.join(_run_dir(config), "report")))


def resolve_model_paths(config: PPOTrainerConfig) -> None:
    """Fill `model.path: null` with the bundled default model, once, so every role loads the same folder; with
    `model.use_shm` the actor's roles load a copy of it in /dev/shm."""
    from verl.models.loader import resolve_model_path

    model = config.actor_rollout_ref.model
    model.path = resolve_model_path(model.path, "actor_rollout_ref.model.path")
    critic_model = config.critic.model
    if model.use_shm:  # as upstream: the actor, reference and rollout load a /dev/shm copy; the critic its own path
        from verl.models.loader import copy_to_shm

        if not critic_model.path:
            critic_model.path = model.path
        model.path = copy_to_shm(model.path, "actor_rollout_ref.model")
    if not critic_model.path:
        critic_model.path = model.path
    if not critic_model.tokenizer_path:
        critic_model.tokenizer_path = model.path


def role_worker_mapping(config: PPOTrainerConfig):
    from verl.single_controller.ray import ResourcePoolManager
    from verl.single_controller.roles import Role
    from verl.workers.fsdp_workers import ActorRolloutRefWorker, CriticWorker

    mapping = {Role.ActorRollout: ActorRolloutRefWorker, Role.Critic: CriticWorker, Role.RefPolicy: ActorRolloutRefWorker}
    pool = "global_pool"
    spec = {pool: [config.trainer.n_gpus_per_node] * config.trainer.nnodes}
    pools = {role: pool for role in mapping}
    rm = config.reward_model
    # a generative reward model (reward_model.rollout.name) runs on its judge engine (genrm.py), not in a worker
    if rm.enable and not rm.rollout.name:  # the actor's pool (colocated: same processes) unless its own, as upstream
        from verl.workers.reward_model_worker import RewardModelWorker

        mapping[Role.RewardModel] = RewardModelWorker
        pools[Role.RewardModel] = pool
        if rm.enable_resource_pool:
            spec["reward_pool"] = [rm.n_gpus_per_node] * rm.nnodes
            pools[Role.RewardModel] = "reward_pool"
    # trainer.device=cpu: the workers must not reserve the cluster's GPUs either
    pool_kwargs = {"use_gpu": False} if config.trainer.device == "cpu" else {}
    manager = ResourcePoolManager(resource_pool_spec=spec, mapping=pools, pool_kwargs=pool_kwargs)
    return mapping, manager


def build_trainer(config: PPOTrainerConfig | Any, compute_score: Any = None, callbacks: Any = None):
    """Everything fit() needs, with Ray started; returns (trainer, tracker, report_dir). Workers not yet built.
    A DictConfig is validated first. `compute_score` (verl.train's reward_fn) takes the place of
    custom_reward_function.path; `callbacks` is what the trainer calls on step end, validation and checkpoint."""
    from verl.checkpoint.lock import hold_checkpoint_dir, release_checkpoint_dir
    from verl.data.rl_dataset import collate_fn
    from verl.data.rl_loading import create_rl_dataset, create_rl_sampler
    from verl.models.loader import load_tokenizer, model_tokenizer_path
    from verl.models.processor import load_processor
    from verl.trainer.config.ulysses_checks import log_sequence_parallel_layout
    from verl.trainer.ppo.data_check import check_data
    from verl.trainer.ppo.engine_length_check import vllm_length_problems
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.resume_guard import early_checks, preflight
    from verl.trainer.ppo.reward import load_reward_manager
    from verl.trainer.ppo.sandbox_service import start_run_sandbox
    from verl.trainer.ppo.vision_checks import video_run_problems, vision_run_problems
    from verl.trainer.resolved_defaults import log_defaults, resolve_ppo_defaults
    from verl.trainer.tracking import Tracking
    from verl.utils.config_errors import ConfigError
    from verl.utils.device import set_device_preference
    from verl.utils.ray_utils import init_ray

    config = as_typed(config)
    # before Ray starts, so every worker process it launches inherits the choice
    set_device_preference(config.trainer.device)
    resolve_model_paths(config)
    early = early_checks(config)  # another run's checkpoint or a live holder of its folder: refused in seconds
    log_defaults(resolve_ppo_defaults(config))  # the hardware's dtypes in place of null, logged once
    problems = vllm_length_problems(config)
    if problems:
        raise ConfigError(problems)
    log_sequence_parallel_layout(config)  # dp x sp per role, when ulysses_sequence_parallel_size > 1
    run_dir = _run_dir(config)
    report_dir = _report_dir(config)
    data = config.data
    model = config.actor_rollout_ref.model
    # data.tokenizer, else actor_rollout_ref.model.tokenizer_path, else the model folder
    tokenizer_path, tokenizer_key = model_tokenizer_path(model, "actor_rollout_ref.model")
    if data.tokenizer:
        tokenizer_path, tokenizer_key = data.tokenizer, "data.tokenizer"
    tokenizer = load_tokenizer(tokenizer_path, tokenizer_key,
                               trust_remote_code=data.trust_remote_code, custom_chat_template=model.custom_chat_template)
    # a vision-language model's processor (images in the rows); None for a text model
    processor = load_processor(tokenizer_path, tokenizer, tokenizer_key, trust_remote_code=data.trust_remote_code)
    # every row of the train and val files, before Ray: a bad row must not surface when its batch comes up
    check_data(config, tokenizer, custom_reward=compute_score is not None, processor=processor)
    train_dataset = create_rl_dataset(data.train_files, data, tokenizer, processor=processor,
                                      max_samples=data.train_max_samples)
    val_dataset = None
    if data.val_files:
        val_dataset = create_rl_dataset(data.val_files, data, tokenizer, processor=processor, is_train=False,
                                        max_samples=data.val_max_samples)
    if getattr(train_dataset, "vision", False) or getattr(val_dataset, "vision", False):
        # what would ignore the images, or is not verified with them, stops here (docs/vlm.md)
        problems = vision_run_problems(config)
        videos = getattr(train_dataset, "videos", False) or getattr(val_dataset, "videos", False)
        if videos:
            problems += video_run_problems(config)
        if problems:
            held = " and ".join(f"{kind} (column {column!r}, data.{kind[:5]}_key)"
                                for kind, column in (("images", data.image_key), ("videos", data.video_key))
                                if _has_column(column, train_dataset, val_dataset))
            raise NotImplementedError(
                f"data.train_files / data.val_files hold {held} for {model.path}; these settings do not run "
                "with them:\n- " + "\n- ".join(problems) +
                "\nSee docs/vlm.md.")
    # before Ray and before anything is written to the run's folder: a different run's checkpoint is refused, a
    # finished run raises RunFinished, and then the folder is locked against a second run
    checked = preflight(config, len(train_dataset), early)
    hold_checkpoint_dir(run_dir)
    try:
        os.makedirs(report_dir, exist_ok=True)
    except BaseException:
        release_checkpoint_dir(run_dir)
        raise
    # before the reward managers (its url) and Ray (the workers' env)
    sandbox = start_run_sandbox(config, custom_reward=compute_score is not None)
    try:
        reward_kwargs = dict(config.reward_model.reward_kwargs)
        reward_fn = load_reward_manager(config, tokenizer, num_examine=0, compute_score=compute_score, **reward_kwargs)
        val_reward_fn = load_reward_manager(config, tokenizer, num_examine=1, compute_score=compute_score,
                                            **reward_kwargs)
        workers = config.trainer.n_gpus_per_node * config.trainer.nnodes
        rm = config.reward_model
        if rm.enable and rm.enable_resource_pool:  # the reward model's own pool (the judge engine's CPUs)
            workers += rm.n_gpus_per_node * rm.nnodes
        elif rm.enable and rm.rollout.name:  # the judge engine's actor
            workers += 1
        init_ray(dataclasses.asdict(config.ray_kwargs), run_dir=run_dir, num_cpus=max(workers + 1, os.cpu_count() or 1))
        mapping, pools = role_worker_mapping(config)
        tracker = Tracking(project_name=config.trainer.project_name, experiment_name=config.trainer.experiment_name,
                           default_backend=list(config.trainer.logger) + ["jsonl"], config=config.to_dict(),
                           log_dir=report_dir)
        trainer = RayPPOTrainer(config, tokenizer, mapping, pools, reward_fn=reward_fn, val_reward_fn=val_reward_fn,
                                train_dataset=train_dataset, val_dataset=val_dataset, collate_fn=collate_fn,
                                train_sampler=create_rl_sampler(data, train_dataset), tracker=tracker)
    except BaseException:
        if sandbox is not None:  # the run never started: its sandbox must not outlive it
            sandbox.stop()
        release_checkpoint_dir(run_dir)
        raise
    trainer.local_sandbox = sandbox
    trainer.callbacks = callbacks
    trainer.run_identity, trainer.identity_checked = checked.identity, checked.checked_folder
    return trainer, tracker, report_dir


def run_training(config: PPOTrainerConfig | Any, compute_score: Any = None, callbacks: Any = None) -> dict:
    """Train as configured; returns the run summary (also written to the report folder).

    Takes the typed PPOTrainerConfig, or a composed DictConfig, which is validated here once."""
    from verl.checkpoint.lock import release_checkpoint_dir
    from verl.trainer.learning_curve import print_learning_curve
    from verl.trainer.ppo.resume_guard import RunFinished
    from verl.trainer.run_report import write_run_report

    start = time.time()
    try:
        trainer, tracker, report_dir = build_trainer(config, compute_score=compute_score, callbacks=callbacks)
    except RunFinished as done:  # said plainly, exit 0, nothing started or written
        print(f"[checkpoint] {done}", file=sys.stderr, flush=True)
        return {"finished": True, "global_step": done.step, "total_training_steps": done.total}
    metrics_file = os.path.join(report_dir, "metrics.jsonl")
    try:
        trainer.init_workers()
        trainer.fit()
        # before finish(): the trackers keep the report's plots with the run (metrics.jsonl is line-buffered,
        # so the report already sees every step)
        summary = write_run_report(metrics_file, report_dir)
        tracker.log_artifacts([os.path.join(report_dir, f) for f in summary["files"] if f.endswith(".png")])
    finally:
        tracker.finish()
        if trainer.local_sandbox is not None:
            trainer.local_sandbox.stop()
        release_checkpoint_dir(_run_dir(trainer.config))
    print_learning_curve(metrics_file)
    summary["wall_time_s"] = round(time.time() - start, 1)
    with open(os.path.join(report_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(f"run report: {report_dir} (wall time {summary['wall_time_s']:.0f}s)", file=sys.stderr)
    return summary


def _has_column(column: str, *datasets) -> bool:
    """Whether any of the datasets' files has ``column`` (a custom dataset without a dataframe counts as having it)."""
    for dataset in datasets:
        frame = getattr(dataset, "dataframe", None)
        if dataset is not None and (frame is None or column in getattr(frame, "column_names", [column])):
            return True
    return False
