"""RayPPOTrainer: the single controller. `fit()` is the whole algorithm, one named call per stage.

The driver holds whole batches (DataProto); each worker-group call is split across ranks and gathered. Which
stages run follows the config: a critic for GAE, a reference policy when KL is used (in the reward or the loss),
a greedy baseline rollout for ReMax.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import torch

from verl.algos.rollout_correction import apply_bypass_mode, apply_rollout_correction
from verl.data.curriculum import AbstractCurriculumSampler
from verl.protocol import DataProto
from verl.single_controller.ray import (
    RayClassWithInitArgs,
    RayWorkerGroup,
    ResourcePoolManager,
    WorkerGroupError,
    create_colocated_worker_cls,
)
from verl.single_controller.roles import Role
from verl.trainer.config import PPOTrainerConfig
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.agent_rollout import MEDIA_KEYS, pop_agent_metrics, pop_generation_input
from verl.trainer.ppo.core_algos import AdvantageEstimator, agg_loss
from verl.trainer.ppo.dynamic_sampling import DataStream, DynamicSampler, attach_reward, attached_reward
from verl.trainer.ppo.generations import decode_generations, dump_generations, sample_generations
from verl.trainer.ppo.genrm import genrm_asleep, start_genrm, stop_genrm
from verl.trainer.ppo.metric_utils import (
    compute_data_metrics,
    compute_stage_throughput_metrics,
    compute_throughout_metrics,
    compute_timing_metrics,
)
from verl.trainer.ppo.old_log_prob_reuse import announce, skip_old_log_prob_pass
from verl.trainer.ppo.profiling import profile_step
from verl.trainer.ppo.reward import compute_reward, compute_reward_async, reward_metrics
from verl.trainer.ppo.reward_model_stage import add_rm_scores
from verl.trainer.ppo.rollout_skip import skip_for_training
from verl.trainer.ppo.state import TrainerState
from verl.trainer.ppo.typed import as_typed
from verl.trainer.ppo.validation import Validator
from verl.trainer.ppo.worker_failures import add_checkpoint_note, worker_deadlines
from verl.utils.metric import reduce_metrics
from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions, log_seqlen_unbalance
from verl.utils.timer import marked_timer
from verl.workers.reward_loop import META_KEY as REWARD_LOOP_META
from verl.workers.reward_loop import RewardLoopManager
from verl.workers.rollout.agent_loop.base import with_template_kwargs, with_trace_names
from verl.workers.rollout.metrics import rollout_probs_diff_metrics
from verl.workers.rollout.prometheus import write_prometheus_config


def _print_placement(pool_name: str, infos: list[dict[str, Any]]) -> None:
    """One line per pool saying which Ray node holds each rank: the node id, since raylets on one machine (or
    behind one NAT) share an IP."""
    if not infos:  # a group of plain (non-Worker) classes reports no placement
        return
    nodes = {info.get("node_id") for info in infos}
    ranks = ", ".join(f"rank {i['rank']} on node {str(i.get('node_id'))[:12]} ({i.get('node_ip')}, pid {i.get('pid')})"
                      for i in infos)
    print(f"[placement] pool '{pool_name}': {len(infos)} rank(s) on {len(nodes)} Ray node(s): {ranks}", flush=True)


class RayPPOTrainer:
    def __init__(self, config: PPOTrainerConfig, tokenizer, role_worker_mapping: dict[Role, Any],
                 resource_pool_manager: ResourcePoolManager, ray_worker_group_cls=RayWorkerGroup,
                 reward_fn=None, val_reward_fn=None, train_dataset=None, val_dataset=None, collate_fn=None,
                 train_sampler=None, tracker=None) -> None:
        # upstream's users pass the composed DictConfig: validated here once (files are the launcher's concern)
        config = as_typed(config, check_files=False)
        self.config = config
        self.tokenizer = tokenizer
        self.role_worker_mapping = role_worker_mapping
        self.resource_pool_manager = resource_pool_manager
        self.ray_worker_group_cls = ray_worker_group_cls
        self.reward_fn, self.val_reward_fn = reward_fn, val_reward_fn
        self.tracker = tracker
        alg = config.algorithm
        self.use_critic = alg.adv_estimator == AdvantageEstimator.GAE
        self.use_reference_policy = config.use_reference_policy
        # a generative reward model (reward_model.rollout.name) is a judge engine, not a worker group (genrm.py)
        self.use_rm = config.reward_model.enable and not config.reward_model.rollout.name
        self.rm_wg = None  # the reward model's worker group, built by init_workers
        self.genrm, self.genrm_stats = None, {}  # the judge engine's manager, and its counters once stopped
        self.kl_ctrl_in_reward = core_algos.get_kl_controller(alg.kl_ctrl) if alg.use_kl_in_reward else None
        self.old_log_prob_reuse = announce(config.old_log_prob_reuse)  # whether steps skip the old-log-prob pass
        fg = alg.filter_groups
        self.dynamic_sampler = DynamicSampler(fg.metric, fg.max_num_gen_batches, config.data.train_batch_size,
                                              config.actor_rollout_ref.rollout.n) if fg.enable else None
        self._create_dataloader(train_dataset, val_dataset, collate_fn, train_sampler)
        self.validator = Validator(config, tokenizer, val_reward_fn, self.val_dataloader)
        self.global_steps = 0
        self.callbacks = None  # verl.train's hooks (verl.trainer.api.callbacks.CallbackList), set by the launcher
        self.rollout_skip = None  # rollout.skip.enable: RolloutSkip, built by fit() (training generations only)

    # -- setup ----------------------------------------------------------------------------------------------------

    def _create_dataloader(self, train_dataset, val_dataset, collate_fn, train_sampler) -> None:
        from torchdata.stateful_dataloader import StatefulDataLoader

        from verl.data.rl_loading import create_val_sampler

        data = self.config.data
        self.train_dataloader = StatefulDataLoader(
            train_dataset, batch_size=data.resolved_gen_batch_size, sampler=train_sampler, collate_fn=collate_fn,
            drop_last=True, num_workers=data.dataloader_num_workers)
        # epochs follow one another; iterated only from fit(), after a checkpoint's data position is loaded
        self.data_stream = DataStream(self.train_dataloader)
        if len(self.train_dataloader) == 0:
            raise ValueError(f"data.train_files has {len(train_dataset)} prompts, fewer than one batch of "
                             f"data.gen_batch_size (null: data.train_batch_size)={data.resolved_gen_batch_size}")
        self.val_dataloader = None
        if val_dataset is not None and len(val_dataset) > 0:
            # validation runs the whole set as one batch, or data.val_batch_size prompts at a time (deprecated
            # upstream, run as there); the worker groups split each batch across ranks
            # data.validation_shuffle: a data.seed-seeded random order instead of the file order
            self.val_dataloader = StatefulDataLoader(val_dataset, batch_size=data.val_batch_size or len(val_dataset),
                                                     sampler=create_val_sampler(data, val_dataset),
                                                     collate_fn=collate_fn, drop_last=False)
        steps = len(self.train_dataloader) * self.config.trainer.total_epochs
        if self.config.trainer.total_training_steps:
            steps = self.config.trainer.total_training_steps
        self.total_training_steps = steps
        # the LR schedules need the horizon before the workers are built
        self.config.actor_rollout_ref.actor.optim.total_training_steps = steps
        self.config.critic.optim.total_training_steps = steps

    def init_workers(self) -> None:
        """Every role mapped to one pool shares one process per rank (the hybrid engine). Start-up is bounded by
        trainer.ray_wait_register_center_timeout, every later call by trainer.worker_call_timeout_s (+ per sample)."""
        try:
            self._init_workers()
        except WorkerGroupError as err:  # a hung or dead worker: say where the run can resume from
            add_checkpoint_note(err, self.config.trainer)
            raise

    def _init_workers(self) -> None:
        self.resource_pool_manager.create_resource_pool()
        by_pool: dict[Any, dict[str, RayClassWithInitArgs]] = {}

        def add(kind: Role, name: str, **kwargs) -> None:
            pool = self.resource_pool_manager.get_resource_pool(kind)
            by_pool.setdefault(pool, {})[name] = RayClassWithInitArgs(self.role_worker_mapping[kind], **kwargs)

        add(Role.ActorRollout, "actor_rollout", config=self.config.actor_rollout_ref, role="actor_rollout")
        if self.use_critic:
            add(Role.Critic, "critic", config=self.config.critic)
        if self.use_reference_policy and not self.config.ref_in_actor:
            add(Role.RefPolicy, "ref", config=self.config.actor_rollout_ref, role="ref")
        if self.use_rm:  # colocated with the actor unless reward_model.enable_resource_pool (launcher's pools)
            add(Role.RewardModel, "rm", config=self.config.reward_model)
        groups: dict[str, RayWorkerGroup] = {}
        for pool, class_dict in by_pool.items():
            wg = self.ray_worker_group_cls(resource_pool=pool, ray_cls_with_init=create_colocated_worker_cls(class_dict),
                                           name_prefix="verl", deadlines=worker_deadlines(self.config.trainer))
            groups.update(wg.spawn(prefix_set=class_dict.keys()))
            _print_placement(getattr(pool, "name_prefix", str(pool)), getattr(wg, "worker_info", []))
        self.critic_wg = groups.get("critic")  # worker groups by role, not config
        self.ref_policy_wg = groups.get("ref")
        self.rm_wg = groups.get("rm")
        self.actor_rollout_wg = groups["actor_rollout"]
        for wg in (self.critic_wg, self.ref_policy_wg, self.rm_wg, self.actor_rollout_wg):  # the rollout is built last
            if wg is not None:
                wg.init_model()
        if self.use_reference_policy and self.config.ref_in_actor:
            self.ref_policy_wg = self.actor_rollout_wg  # LoRA: the actor with its adapter disabled is the reference
        prometheus = self.config.actor_rollout_ref.rollout.prometheus
        if prometheus.enable:  # the engines' metrics endpoints, listed in the scrape configuration upstream writes
            targets = [a for a in self.actor_rollout_wg.prometheus_address() if a]
            write_prometheus_config(prometheus, targets, self.config.actor_rollout_ref.rollout.name)
        self.validator.bind(self.actor_rollout_wg)
        # before anything is scored; stopped at the end of fit. Without its own pool it shares the actor's (GPU)
        self.genrm = start_genrm(self.config, self.resource_pool_manager.get_resource_pool(Role.ActorRollout))

    # -- the loop -------------------------------------------------------------------------------------------------

    def fit(self) -> None:
        try:
            self._fit()
        except (WorkerGroupError, FloatingPointError) as err:  # a hung or dead worker, a NaN streak: where to resume
            add_checkpoint_note(err, self.config.trainer)
            raise
        finally:
            self._close_reward_managers()

    def _close_reward_managers(self) -> None:
        """End the built-in managers' scoring processes and the judge engine with the run, not at garbage
        collection."""
        if self.genrm is not None:
            self.genrm_stats, self.genrm = stop_genrm(self.config, self.genrm), None
        for manager in (self.reward_fn, self.val_reward_fn):
            close = getattr(manager, "close", None)
            if callable(close):
                close()

    def _fit(self) -> None:
        from verl.trainer.progress import TrainingProgress

        trainer = self.config.trainer
        self._load_checkpoint()
        self.rollout_skip, self._train_rollout = skip_for_training(self.config, getattr(self, "actor_rollout_wg", None))
        if self.tracker is not None and hasattr(self.tracker, "start_run"):  # a custom tracker may not have it
            self.tracker.start_run(self.global_steps)
        if self.validator.enabled and trainer.val_before_train:
            self._log(self._validate(), step=self.global_steps)  # resumed: its step
            if trainer.val_only:
                return
        progress = TrainingProgress(self.total_training_steps, initial=self.global_steps)
        last_val: dict[str, float] = {}
        while self.global_steps < self.total_training_steps:
            batch_dict = next(self.data_stream)  # a step may draw more (dynamic sampling)
            self.global_steps += 1
            with profile_step(self, self.global_steps):  # global_profiler.steps: the workers' traces
                metrics = self._train_step_noting_failures(batch_dict)
            is_last = self.global_steps >= self.total_training_steps
            if self.validator.enabled and trainer.test_freq > 0 and (
                    is_last or self.global_steps % trainer.test_freq == 0):
                last_val = self._validate()
                metrics.update(last_val)
            self._log(metrics, step=self.global_steps)
            self._notify("on_step_end", metrics)
            progress.advance(_summary(metrics))
            if trainer.save_freq > 0 and (self.global_steps % trainer.save_freq == 0 or is_last):
                self._save_checkpoint()
        progress.close()
        self.final_validation_metrics = last_val

    def _validate(self) -> dict[str, float]:
        """Validation metrics at the current step; trainer.log_val_generations samples go to the loggers."""
        metrics = self.validator.run(self.global_steps)
        n = self.config.trainer.log_val_generations
        if n > 0 and self.tracker is not None and hasattr(self.tracker, "log_generations"):
            self.tracker.log_generations(sample_generations(self.validator.last_generations, n), self.global_steps)
        self._notify("on_validation", metrics)
        return metrics

    def _notify(self, hook: str, payload: Any) -> None:
        """A callback's error propagates: it stops the run like any other failure of the step."""
        if self.callbacks is not None:
            self.callbacks.call(hook, self.global_steps, payload)

    # -- checkpoint state -------------------------------------------------------------------------------------

    def trainer_state(self) -> TrainerState:
        """The driver's side of a checkpoint, and the batch geometry its data position depends on."""
        kl = self.kl_ctrl_in_reward
        return TrainerState.capture(
            global_steps=self.global_steps, dataloader=self.train_dataloader.state_dict(),
            kl_ctrl={k: float(v) for k, v in vars(kl).items()} if kl is not None else None,
            train_batch_size=self.config.data.train_batch_size, gen_batch_size=self.config.data.resolved_gen_batch_size,
            dataset_len=len(self.train_dataloader.dataset),
            world_size=self.actor_rollout_wg.world_size, total_training_steps=self.total_training_steps)

    def restore_state(self, state: TrainerState) -> None:
        self.train_dataloader.load_state_dict(state.dataloader)
        if self.kl_ctrl_in_reward is not None and state.kl_ctrl:
            for key, value in state.kl_ctrl.items():
                setattr(self.kl_ctrl_in_reward, key, value)
        state.restore_rng()
        self.global_steps = state.global_steps

    def _save_checkpoint(self) -> None:
        from verl.trainer.ppo.checkpointing import save_checkpoint

        self._notify("on_checkpoint", save_checkpoint(self))

    def _load_checkpoint(self) -> int:
        from verl.trainer.ppo.checkpointing import load_checkpoint

        return load_checkpoint(self)

    def _train_step_noting_failures(self, batch_dict: dict) -> dict[str, float]:
        try:
            return self.train_step(batch_dict)
        except Exception as err:  # a worker's error names its rank and micro-batch; the step is only known here
            if hasattr(err, "add_note"):  # Python >= 3.11
                err.add_note(f"during training step {self.global_steps}; no checkpoint was written from this step")
            raise

    def train_step(self, batch_dict: dict) -> dict[str, float]:
        """One PPO/GRPO iteration: generate, score, log-probs, values, advantages, updates."""
        metrics: dict[str, float] = {}
        timing: dict[str, float] = {}
        with marked_timer("step", timing):
            with marked_timer("gen", timing):
                batch = self._rollout(batch_dict, metrics)
            if self.config.algorithm.adv_estimator == AdvantageEstimator.REMAX:
                with marked_timer("gen_max", timing):
                    self._add_remax_baseline(batch)
            if self.config.trainer.balance_batch:
                self._balance_batch(batch, metrics)
            with marked_timer("reward", timing):
                reward = self._start_reward(batch)
                batch.non_tensor_batch.pop("__rm_scored__", None)  # read by the reward (a Ray task holds a copy)
            if not skip_old_log_prob_pass(self.old_log_prob_reuse, batch, metrics, self.global_steps):
                with marked_timer("old_log_prob", timing):  # skipped: the update's first forward is pi_old
                    self._add_old_log_prob(batch, metrics)
            if self.use_reference_policy:
                with marked_timer("ref", timing):
                    batch = batch.union(self.ref_policy_wg.compute_ref_log_prob(batch))
            if self.use_critic:
                with marked_timer("values", timing):
                    batch = batch.union(self.critic_wg.compute_values(batch))
            with marked_timer("adv", timing):
                reward_tensor, reward_extra = self._finish_reward(reward)
                batch = self._compute_advantage(batch, reward_tensor, reward_extra, metrics)
            if self.config.trainer.rollout_data_dir:
                with marked_timer("dump_rollout_generations", timing):
                    self._dump_rollouts(batch, reward_extra)
            with genrm_asleep(self.genrm):  # a judge sharing the actor's GPU frees it while the updates run
                if self.use_critic:
                    with marked_timer("update_critic", timing):
                        metrics.update(reduce_metrics(self.critic_wg.update_critic(batch).meta_info["metrics"]))
                if self.global_steps > self.config.trainer.critic_warmup:
                    with marked_timer("update_actor", timing):
                        metrics.update(reduce_metrics(self.actor_rollout_wg.update_actor(batch).meta_info["metrics"]))
        sampler = getattr(self.train_dataloader, "sampler", None)
        if isinstance(sampler, AbstractCurriculumSampler):  # data.sampler: the user's curriculum sees every batch
            sampler.update(batch)
        dataset = getattr(self.train_dataloader, "dataset", None)
        if hasattr(dataset, "on_batch_end"):  # data.datagen (DynamicGenDataset): rows added after every step
            dataset.on_batch_end(batch)
        check_finite_metrics(metrics, self.global_steps)
        metrics["training/global_step"] = self.global_steps
        metrics.update(compute_data_metrics(batch, use_critic=self.use_critic))
        metrics.update(compute_timing_metrics(batch, timing))
        metrics.update(compute_throughout_metrics(batch, timing, n_gpus=self.resource_pool_manager.get_n_gpus()))
        metrics.update(compute_stage_throughput_metrics(batch, timing))
        return metrics

    # -- stages ---------------------------------------------------------------------------------------------------

    def _rollout(self, batch_dict: dict, metrics: dict[str, float]) -> DataProto:
        """The step's responses: one generation round, or with algorithm.filter_groups (DAPO) as many rounds,
        each scored, as it takes to fill the batch with groups whose responses differ (dynamic_sampling.py)."""
        if self.dynamic_sampler is not None:
            batch = self.dynamic_sampler.collect(batch_dict, self.data_stream, self._generate_and_score, metrics)
        else:
            batch = self._generate(self._new_batch(batch_dict))
        metrics.update(pop_agent_metrics(batch))  # of the rows trained on
        return batch

    def _generate_and_score(self, batch_dict: dict) -> DataProto:
        """One dynamic-sampling round: its reward is needed now, to filter, and rides on the rows from here on."""
        batch = self._generate(self._new_batch(batch_dict))
        reward_tensor, reward_extra = self._finish_reward(self._start_reward(batch))
        batch.non_tensor_batch.pop("__rm_scored__", None)
        attach_reward(batch, reward_tensor, reward_extra)
        return batch

    def _start_reward(self, batch: DataProto) -> Any:
        """reward_model.launch_reward_fn_async: score in a Ray task while the log-prob/ref/value passes run;
        the ObjectRef is collected by _finish_reward before the advantages. Otherwise scored here and now.
        Rows scored during dynamic sampling keep that score."""
        scored = attached_reward(batch)
        if scored is not None:
            return scored
        if self.rm_wg is not None:  # reward_model.enable: rm_scores replace the rule score (reward_model_stage.py)
            add_rm_scores(batch, self.rm_wg)
        if self.config.reward_model.launch_reward_fn_async:
            return compute_reward_async(batch, reward_fn=self.reward_fn)
        return compute_reward(batch, self.reward_fn)

    @staticmethod
    def _finish_reward(reward: Any) -> tuple[torch.Tensor, dict]:
        if isinstance(reward, tuple):
            return reward
        import ray

        return ray.get(reward)

    def _dump_rollouts(self, batch: DataProto, reward_extra: dict) -> None:
        scores = batch.batch["token_level_scores"].sum(-1).tolist()
        dump_generations(self.config.trainer.rollout_data_dir, self.global_steps,
                         decode_generations(batch, self.tokenizer, scores, reward_extra))

    def _new_batch(self, batch_dict: dict) -> DataProto:
        batch = DataProto.from_single_dict(batch_dict)
        batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
        return batch

    def _generate(self, batch: DataProto) -> DataProto:
        """n responses per prompt, interleaved (p0 p0 p1 p1 ...), the prompt's fields repeated alongside."""
        rollout = self.config.actor_rollout_ref.rollout
        gen_batch = pop_generation_input(batch, rollout.mode)
        gen_batch.meta_info.update(self._gen_meta(do_sample=True))
        if rollout.mode == "async" and self.rm_wg is None and isinstance(self.reward_fn, RewardLoopManager):
            gen_batch.meta_info[REWARD_LOOP_META] = self.reward_fn.spec()  # scored as each sample finishes
        source = self.actor_rollout_wg
        if self.rollout_skip is not None:  # a replayed round swaps in the prompts its dumped responses belong to
            self.rollout_skip.record(batch)
            source = self._train_rollout
        output = source.generate_sequences(gen_batch.repeat(rollout.n, interleave=True))
        return batch.repeat(rollout.n, interleave=True).union(output)

    def _gen_meta(self, do_sample: bool) -> dict[str, Any]:
        meta = {"eos_token_id": self.tokenizer.eos_token_id, "pad_token_id": self.tokenizer.pad_token_id,
                "do_sample": do_sample, "global_steps": self.global_steps}
        return with_trace_names(with_template_kwargs(meta, self.config.data), self.config)

    def _add_remax_baseline(self, batch: DataProto) -> None:
        """ReMax: the reward of the greedy response to the same prompt is each sample's baseline."""
        prompt_mask = batch.batch["attention_mask"][:, : batch.batch["prompts"].size(1)]
        gen = DataProto.from_dict(
            tensors={"input_ids": batch.batch["prompts"], "attention_mask": prompt_mask,
                     "position_ids": batch.batch["position_ids"][..., : prompt_mask.size(1)]},  # (bs[, 4], P)
            non_tensors={k: batch.non_tensor_batch[k] for k in MEDIA_KEYS if k in batch.non_tensor_batch},
            meta_info=self._gen_meta(do_sample=False))
        greedy = self.actor_rollout_wg.generate_sequences(gen)
        scored = DataProto(batch=greedy.batch, non_tensor_batch=dict(batch.non_tensor_batch))
        if self.rm_wg is not None:  # the baseline on the samples' scale
            add_rm_scores(scored, self.rm_wg)
        baseline, _ = compute_reward(scored, self.reward_fn)
        batch.batch["reward_baselines"] = baseline.sum(dim=-1)

    def _balance_batch(self, batch: DataProto, metrics: dict[str, float]) -> None:
        """Reorder so each data-parallel rank gets a similar number of real tokens (rows stay whole).

        Metrics (upstream names): ``global_seqlen/{min,max,minmax_diff}`` per rank for the split the batch arrived
        in, ``global_seqlen/{balanced_min,balanced_max}`` after balancing, ``global_seqlen/mean``.
        """
        world = self.actor_rollout_wg.world_size
        if world <= 1 or len(batch) % world:
            return
        seqlens = batch.batch["attention_mask"].sum(-1).tolist()
        parts = get_seqlen_balanced_partitions(seqlens, k_partitions=world, equal_size=True)
        order = torch.tensor([i for part in parts for i in sorted(part)])
        batch.reorder(order)
        metrics.update(log_seqlen_unbalance(seqlens, parts, prefix="global_seqlen"))
        per_rank = [sum(seqlens[i] for i in part) for part in parts]
        metrics["perf/balance_max_over_min_tokens"] = max(per_rank) / max(1, min(per_rank))

    def _add_old_log_prob(self, batch: DataProto, metrics: dict[str, float]) -> None:
        """old_log_probs from the actor, then rollout correction (IS weights, rejection) before the advantages."""
        correction = self.config.algorithm.rollout_correction
        if correction.bypass_mode:  # pi_old := pi_rollout: no actor pass; IS/RS happen in the actor's loss
            apply_bypass_mode(batch, correction)
            return
        out = self.actor_rollout_wg.compute_log_prob(batch)
        entropys = out.batch.pop("entropys", None) if out.batch is not None else None
        if entropys is not None:
            mode = self.config.actor_rollout_ref.actor.loss_agg_mode
            metrics["actor/entropy"] = agg_loss(entropys, batch.batch["response_mask"], mode).item()
        batch.union(out)
        if "rollout_log_probs" in batch.batch.keys():  # rollout.calculate_log_probs: is the engine on the actor's weights?
            metrics.update(rollout_probs_diff_metrics(batch.batch["rollout_log_probs"], batch.batch["old_log_probs"],
                                                      batch.batch["response_mask"]))
            metrics.update(apply_rollout_correction(batch, correction))

    def _compute_advantage(self, batch: DataProto, reward_tensor: torch.Tensor, reward_extra: dict,
                           metrics: dict[str, float]) -> DataProto:
        alg = self.config.algorithm
        batch.batch["token_level_scores"] = reward_tensor
        for key, values in reward_extra.items():
            batch.non_tensor_batch[key] = np.array(values, dtype=object)
            try:
                metrics[f"reward_extra/{key}/mean"] = float(np.mean(np.asarray(values, dtype=float)))
            except (TypeError, ValueError):
                pass
        metrics.update(reward_metrics(reward_extra))  # reward/timeouts
        if self.kl_ctrl_in_reward is not None:
            batch, kl_metrics = core_algos.apply_kl_penalty(batch, kl_ctrl=self.kl_ctrl_in_reward,
                                                            kl_penalty=alg.kl_penalty)
            metrics.update(kl_metrics)
        else:
            batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
        return core_algos.compute_advantage(
            batch, adv_estimator=alg.adv_estimator, gamma=alg.gamma, lam=alg.lam,
            num_repeat=self.config.actor_rollout_ref.rollout.n,
            norm_adv_by_std_in_grpo=alg.norm_adv_by_std_in_grpo, config=alg)

    def _log(self, metrics: dict[str, float], step: int) -> None:
        if self.tracker is not None and metrics:
            self.tracker.log(data=metrics, step=step)


def _summary(metrics: dict[str, float]) -> str:
    keys = ("critic/score/mean", "response_length/mean", "timing_s/step")
    return "  ".join(f"{k.split('/')[-2] if k.count('/') > 1 else k}={metrics[k]:.3g}" for k in keys if k in metrics)


def check_finite_metrics(metrics: dict[str, float], step: int) -> None:
    """A NaN loss that slipped past the workers' own checks stops the run here, before anything is saved."""
    bad = [k for k in ("actor/pg_loss", "critic/vf_loss", "actor/kl_loss") if k in metrics and not np.isfinite(metrics[k])]
    if bad:
        raise FloatingPointError(f"step {step}: non-finite {', '.join(bad)}; stopping before any checkpoint is "
                                 "written from these weights. Lower the learning rate or check the rewards.")
