"""Ray workers that hold FSDP2 models: the actor/rollout/ref hybrid and the critic.

One instance per rank. The driver calls their `@register`-ed methods on a worker group; DP_COMPUTE_PROTO splits
the batch across ranks, so each method sees only its shard. Batch sizes arrive in the user's units (prompts) and
are normalised here to responses per rank, once, before the compute classes are built.

The workers receive typed config sections (verl.workers.config, beside them): ActorRolloutRefWorker an
ActorRolloutRefConfig, CriticWorker an FSDPCriticConfig. Upstream's ``fsdp_workers.RewardModelWorker`` is
verl.workers.reward_model_worker's, reachable here by that name.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import time
from typing import TypeVar

import torch
import torch.distributed as dist

from verl.models.lora import adapter_io, lora_from_model_config
from verl.protocol import DataProto
from verl.single_controller.base import Dispatch, Worker, register
from verl.utils.determinism import enable_full_determinism, seed_everything
from verl.utils.device import get_default_device
from verl.utils.flops_counter import FlopsCounter, measure_matmul_peak, mfu
from verl.utils.malloc_tuning import release_free_memory, tune_malloc_for_training
from verl.utils.memory_stats import peak_memory_metrics
from verl.utils.profiler import DistProfiler
from verl.workers.config import (
    ActorConfig,
    ActorRolloutRefConfig,
    CriticConfig,
    FSDPCriticConfig,
    RefConfig,
    RolloutConfig,
)
from verl.workers.fsdp_utils import (
    apply_fsdp2,
    build_lr_scheduler,
    build_optimizer,
    create_device_mesh,
    mixed_precision_policy,
    to_torch_dtype,
)
from verl.workers.profiling import DistProfilerExtension, role_profiler, rollout_beside_actor
from verl.workers.ulysses_dispatch import SequenceParallelRole

logger = logging.getLogger(__name__)

_ROLES = ("actor", "rollout", "ref", "actor_rollout", "actor_rollout_ref")

SectionT = TypeVar("SectionT", ActorConfig, CriticConfig)


def normalize_ppo_batch_sizes(cfg: SectionT, key_prefix: str, dp_size: int) -> SectionT:
    """A copy of an FSDPActorConfig / FSDPCriticConfig with ppo_mini_batch_size in responses per rank (users write
    prompts; the compute classes count responses) and ppo_micro_batch_size_per_gpu filled in."""
    mini = cfg.ppo_mini_batch_size * cfg.rollout_n
    if mini % dp_size:
        raise ValueError(f"{key_prefix}.ppo_mini_batch_size x rollout.n = {mini} is not divisible by the "
                         f"{dp_size} data-parallel ranks")
    per_rank = mini // dp_size
    micro = cfg.ppo_micro_batch_size_per_gpu
    if cfg.ppo_micro_batch_size and not micro:
        micro = max(1, cfg.ppo_micro_batch_size // dp_size)  # the deprecated global size counts across ranks
    if not micro:
        micro = per_rank
    return dataclasses.replace(cfg, ppo_mini_batch_size=per_rank, ppo_micro_batch_size_per_gpu=micro)


class _FSDPWorkerBase(Worker, DistProfilerExtension):
    _sp: SequenceParallelRole | None = None  # set by init_model; a worker built without it runs as sp 1

    def _sp_gather(self, data: DataProto) -> tuple[DataProto, slice]:
        return self._sp.gather(data) if self._sp is not None else (data, slice(0, len(data)))

    @property
    def _dp_size(self) -> int:
        return self._sp.dp_size if self._sp is not None else self.world_size

    def _init_distributed(self, fsdp_size: int = -1, timeout_seconds: float | None = None) -> None:
        """The process group (its collectives time out after ``timeout_seconds``, torch's default when None), and
        the mesh FSDP2 shards over: all ranks, or HSDP (replicas of fsdp_size-rank shard groups) when the role's
        fsdp_config.fsdp_size is smaller than the world."""
        self.init_torch_distributed(timeout_seconds=timeout_seconds)
        self.device_mesh = create_device_mesh(dist.get_world_size(), fsdp_size)

    @staticmethod
    def _seed(fsdp_config, offset: int = 0, deterministic: bool = False) -> None:
        """The role's fsdp_config.seed (+ ``offset``: the rank, where ranks must draw differently) seeds this
        process before its model is built: a freshly initialised head, dropout and sampling repeat from run to run.
        With fsdp_config.full_determinism (or ``deterministic``) torch's deterministic mode is on in it too."""
        seed = fsdp_config.seed + offset
        if fsdp_config.full_determinism or deterministic:
            enable_full_determinism(seed)
        else:
            seed_everything(seed)

    def _model_dtype(self, fsdp_config, key: str) -> torch.dtype:
        return to_torch_dtype(fsdp_config.model_dtype, f"{key}.fsdp_config.model_dtype")

    def _init_perf(self, module: torch.nn.Module, fsdp_config, key: str) -> None:
        """FLOPs counter and the matmul peak of this rank, in the dtype the matmuls run in (measured once)."""
        policy = mixed_precision_policy(fsdp_config, warn=False)  # apply_fsdp2 has warned
        dtype = policy.param_dtype if policy.param_dtype is not None else self._model_dtype(fsdp_config, key)
        self._flops_counter = FlopsCounter(module)
        self._matmul_peak = measure_matmul_peak(get_default_device(), dtype)

    @staticmethod
    def _keep_host_memory_mapped() -> None:
        """On CPU, let glibc keep freed activation memory (verl/utils/malloc_tuning.py): each micro-batch otherwise
        page-faults its activations in afresh. Called after the engines are built, so their own large buffers
        (vLLM's KV cache) stay separate mappings; the free memory is handed back before each rollout."""
        if get_default_device() == "cpu":
            tune_malloc_for_training()

    def _perf_metrics(self, role: str, data: DataProto, seconds: float, epochs: int) -> dict[str, float]:
        """perf/mfu/<role> of one update on this rank's shard (real tokens, epochs passes), and peak memory."""
        batch = data.batch
        seqlens = batch["attention_mask"].sum(-1).tolist()
        logit_positions = int(batch["response_mask"].sum().item()) if role == "actor" else 0
        flops = self._flops_counter.training_flops(seqlens, logit_positions) * epochs
        metrics = {f"perf/mfu/{role}": mfu(flops, seconds, self._matmul_peak),
                   f"perf/matmul_peak_tflops/{role}": self._matmul_peak / 1e12}
        metrics.update(peak_memory_metrics())
        return metrics


class ActorRolloutRefWorker(_FSDPWorkerBase):
    """Any mix of the policy's jobs in one process: train (actor), generate (rollout), frozen reference (ref)."""

    def __init__(self, config: ActorRolloutRefConfig, role: str) -> None:
        """`config`: the typed ActorRolloutRefConfig (model, actor, ref, rollout)."""
        super().__init__()
        if role not in _ROLES:
            raise ValueError(f"ActorRolloutRefWorker role {role!r} is not one of {_ROLES}")
        self.config = config
        self.role = role
        self._is_actor = role in ("actor", "actor_rollout", "actor_rollout_ref")
        self._is_rollout = role in ("rollout", "actor_rollout", "actor_rollout_ref")
        self._is_ref = role in ("ref", "actor_rollout_ref")
        # LoRA: the reference policy is this worker's own module with the adapter disabled, not a second copy
        self._ref_in_actor = self._is_actor and config.model.lora_rank > 0
        # upstream's choice: the actor's profiler for a worker that trains, else the rollout's, else the ref's
        section = config.actor if self._is_actor else config.rollout if self._is_rollout else config.ref
        self.profiler = role_profiler(self.rank, section.profiler, role)
        self.extra_profilers = rollout_beside_actor(self.rank, config, self.profiler, self._is_actor and self._is_rollout)

    # -- building -------------------------------------------------------------------------------------------------

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        from verl.models.loader import load_causal_lm, load_tokenizer, model_tokenizer_path

        cfg = self.config
        # the actor's fsdp_size shapes the mesh of the module the actor, rollout (and a LoRA reference) share
        trains_or_generates = self._is_actor or self._is_rollout
        self._init_distributed((cfg.actor if trains_or_generates else cfg.ref).fsdp_config.fsdp_size,
                               timeout_seconds=cfg.nccl_timeout)
        # one process: the reference's full_determinism turns deterministic mode on for all of it
        self._seed((cfg.actor if trains_or_generates else cfg.ref).fsdp_config, self.rank,
                   deterministic=self._is_ref and cfg.ref.fsdp_config.full_determinism)
        self._sp = _actor_sequence_parallel(cfg)
        self.tokenizer = None
        if self._is_actor or self._is_rollout:
            fsdp_cfg = cfg.actor.fsdp_config
            module, path = load_causal_lm(cfg.model, "actor_rollout_ref.model",
                                          dtype=self._model_dtype(fsdp_cfg, "actor_rollout_ref.actor"))
            self.model_path = path
            self.tokenizer_path, self._tokenizer_key = model_tokenizer_path(cfg.model, "actor_rollout_ref.model")
            self.tokenizer = load_tokenizer(self.tokenizer_path, self._tokenizer_key,
                                            trust_remote_code=cfg.model.trust_remote_code,
                                            custom_chat_template=cfg.model.custom_chat_template)
            module = lora_from_model_config(module, cfg.model, "actor_rollout_ref.model")
            if self._is_actor and cfg.actor.freeze_vision_tower:
                from verl.models.vision import freeze_vision_tower

                freeze_vision_tower(module)
            self.actor_module = apply_fsdp2(module, fsdp_cfg, self.device_mesh,
                                            offload_activations=self._is_actor and cfg.model.enable_activation_offload)
        if self._is_actor:
            self._build_actor()
        if self._is_rollout:
            self._build_rollout()
        if self._is_ref and not self._ref_in_actor:
            self._build_ref()
        self._keep_host_memory_mapped()

    def _build_actor(self) -> None:
        from verl.workers.actor import DataParallelPPOActor

        actor_cfg = normalize_ppo_batch_sizes(self.config.actor, "actor_rollout_ref.actor", self._dp_size)
        actor_cfg = self._sp.scale_token_budgets(actor_cfg, "ppo_max_token_len_per_gpu")
        self.actor_optimizer = build_optimizer(self.actor_module, actor_cfg.optim, "actor_rollout_ref.actor.optim")
        self.actor_lr_scheduler = build_lr_scheduler(self.actor_optimizer, actor_cfg.optim, "actor_rollout_ref.actor.optim")
        self.actor = DataParallelPPOActor(actor_cfg, self.actor_module, self.actor_optimizer)
        self._init_perf(self.actor_module, self.config.actor.fsdp_config, "actor_rollout_ref.actor")
        self._ppo_epochs = actor_cfg.ppo_epochs

    def _build_rollout(self) -> None:
        from verl.workers.rollout.registry import build_rollout

        self.rollout, self.rollout_sharding_manager = build_rollout(
            self.config.rollout, self.actor_module, self.tokenizer, self.model_path, self.device_mesh,
            trust_remote_code=self.config.model.trust_remote_code)
        self.agent_loop_manager = None
        if self.config.rollout.mode == "async":
            from verl.workers.rollout.agent_loop.manager import AgentLoopManager

            self.agent_loop_manager = AgentLoopManager(self.config, self.tokenizer, self._agent_loop_backend,
                                                       processor=self._rollout_processor(),
                                                       engine_group=self._engine_group(),
                                                       seed=self.config.rollout.seed)
        # the actor also serves compute_log_prob; a rollout-only worker builds a no-grad actor for it
        if not self._is_actor:
            from verl.workers.actor import DataParallelPPOActor

            self.actor = DataParallelPPOActor(self.config.actor, self.actor_module)

    def _build_ref(self) -> None:
        from verl.models.loader import load_causal_lm
        from verl.workers.actor import DataParallelPPOActor

        ref_cfg = self.config.ref
        fsdp_cfg = ref_cfg.fsdp_config
        model_cfg, key = self.config.model, "actor_rollout_ref.model"
        if ref_cfg.model is not None:  # ref.model.path: a different reference model, built as the actor's is
            model_cfg = dataclasses.replace(model_cfg, path=ref_cfg.model["path"], hf_config_path=None)
            key = "actor_rollout_ref.ref.model"
        with torch.random.fork_rng():  # beside the actor: the reference's seed for its build, the actor's after it
            torch.manual_seed(fsdp_cfg.seed + self.rank)
            module, _ = load_causal_lm(model_cfg, key, dtype=self._model_dtype(fsdp_cfg, "actor_rollout_ref.ref"))
        module.requires_grad_(False)
        mesh = self.device_mesh
        if (self._is_actor or self._is_rollout) and fsdp_cfg.fsdp_size != self.config.actor.fsdp_config.fsdp_size:
            mesh = create_device_mesh(dist.get_world_size(), fsdp_cfg.fsdp_size)  # a reference sharded its own way
        self.ref_module = apply_fsdp2(module, fsdp_cfg, mesh)
        self.ref_policy = DataParallelPPOActor(ref_cfg, self.ref_module)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def prometheus_address(self) -> str | None:
        """``host:port`` of this rank's vLLM metrics endpoint (rollout.prometheus.enable), else None."""
        return getattr(getattr(self, "rollout", None), "metrics_address", None)

    # -- compute --------------------------------------------------------------------------------------------------

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @DistProfiler.annotate()
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        assert self._is_rollout, f"generate_sequences called on a worker with role {self.role!r}"
        prompts.meta_info.setdefault("eos_token_id", self._eos_token_ids())
        prompts.meta_info.setdefault("pad_token_id", self.tokenizer.pad_token_id)
        start = time.perf_counter()
        release_free_memory()  # what training kept mapped goes back before the KV cache wakes up
        with self.rollout_sharding_manager:
            prompts = self.rollout_sharding_manager.preprocess_data(prompts)
            if self.agent_loop_manager is not None:  # rollout.mode=async
                output = self._agent_loop_generate(prompts)
            else:
                output = self.rollout.generate_sequences(prompts)
            output = self.rollout_sharding_manager.postprocess_data(output)
        output.meta_info["timing"] = {"generate_sequences": time.perf_counter() - start}
        return output

    def _agent_loop_generate(self, prompts: DataProto) -> DataProto:
        from verl.workers.rollout.vllm.sampling import sampling_kwargs

        params = sampling_kwargs(self.config.rollout, prompts.meta_info)
        params.pop("n", None)
        output = self.agent_loop_manager.generate_sequences(prompts, params)
        output.meta_info["agent_stats"] = dict(self.agent_loop_manager.last_stats)
        return output

    def _engine_group(self):
        """The ranks this rank's rollout engine must step with (agent loop): all FSDP ranks for HF generate on the
        sharded module, the tensor-parallel group for vLLM; None when the engine is this rank's alone."""
        from verl.workers.rollout.agent_loop.lockstep import EngineGroup

        rollout = self.config.rollout
        if rollout.name == "hf" and dist.get_world_size() > 1:
            return EngineGroup("lockstep", dist.group.WORLD, dist.get_rank(), dist.get_world_size(), 0)
        if rollout.name == "vllm" and rollout.tensor_model_parallel_size > 1:
            group, rank_in_group = self.rollout_sharding_manager._tp_group()
            size = rollout.tensor_model_parallel_size
            return EngineGroup("mirror", group, rank_in_group, size, dist.get_rank() - rank_in_group)
        return None

    def _agent_loop_backend(self, meta: dict):
        from verl.workers.rollout.agent_loop.backends import HFBackend, VLLMBackend

        if self.config.rollout.name == "vllm":
            return VLLMBackend(self.rollout, meta)
        return HFBackend(self.rollout, meta, self.config.rollout.prompt_length, processor=self._rollout_processor())

    def _checkpoint_processing_class(self):
        """What the checkpoint's HF folder saves beside the config: the model folder's processor for a VLM, else the
        tokenizer (a worker built without its model path, as some tests build it, has only the tokenizer)."""
        processor = self._rollout_processor() if getattr(self, "model_path", None) else None
        return processor or self.tokenizer

    def _rollout_processor(self):
        """The model folder's multi-modal processor (images of agent-loop requests), None for a text model."""
        if not hasattr(self, "_processor"):
            from verl.models.processor import load_processor

            folder = getattr(self, "tokenizer_path", None) or self.model_path  # model.tokenizer_path, else path
            key = getattr(self, "_tokenizer_key", "actor_rollout_ref.model.path")
            self._processor = load_processor(folder, self.tokenizer, key,
                                             trust_remote_code=self.config.model.trust_remote_code)
        return self._processor

    def _eos_token_ids(self) -> list[int]:
        ids = {self.tokenizer.eos_token_id}
        gen_eos = getattr(getattr(self.actor_module, "generation_config", None), "eos_token_id", None)
        ids.update(gen_eos if isinstance(gen_eos, list) else [gen_eos])
        return sorted(i for i in ids if i is not None)

    def _log_prob_meta(self, data: DataProto, section: RolloutConfig | RefConfig) -> None:
        """The log-prob pass's batching from the rollout's (old log-probs) or the ref's section."""
        data.meta_info.setdefault("temperature", self.config.rollout.temperature)
        data.meta_info["micro_batch_size"] = _log_prob_micro_batch(section, self._dp_size)
        data.meta_info["use_dynamic_bsz"] = section.log_prob_use_dynamic_bsz
        data.meta_info["max_token_len"] = section.log_prob_max_token_len_per_gpu * (self.world_size // self._dp_size)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @DistProfiler.annotate()
    def compute_log_prob(self, data: DataProto) -> DataProto:
        """old_log_probs (and per-token entropy; sum_pi_squared with actor.calculate_sum_pi_squared) under the
        current policy, at the rollout temperature."""
        data, own_rows = self._sp_gather(data)
        self._log_prob_meta(data, self.config.rollout)
        spsq = bool(getattr(self.config.actor, "calculate_sum_pi_squared", False))
        log_probs, entropys = self.actor.compute_log_prob(data, calculate_entropy=True, calculate_sum_pi_squared=spsq)
        tensors = {"old_log_probs": log_probs[own_rows]}
        if entropys is not None:
            tensors["entropys"] = entropys[own_rows]
        if spsq:  # actor.calculate_sum_pi_squared: the optimal token baseline's input (verl.algos.otb)
            tensors["sum_pi_squared"] = self.actor.last_sum_pi_squared[own_rows]
        if self.actor.last_routed_experts is not None:  # actor.router_replay.mode=R2: the update replays it
            tensors["routed_experts"] = self.actor.last_routed_experts[own_rows]
        return DataProto.from_dict(tensors=tensors, meta_info={"temperature": data.meta_info["temperature"]})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @DistProfiler.annotate()
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        assert self._is_ref or self._ref_in_actor, f"compute_ref_log_prob called on a worker with role {self.role!r}"
        data, own_rows = self._sp_gather(data)
        self._log_prob_meta(data, self.config.ref)
        if getattr(self, "ref_policy", None) is None:  # LoRA (_ref_in_actor): no reference module was built
            with self.actor_module.disable_adapter():  # the base model: the actor's weights without the adapter
                log_probs, _ = self.actor.compute_log_prob(data, calculate_entropy=False)
        else:
            log_probs, _ = self.ref_policy.compute_log_prob(data, calculate_entropy=False)
        return DataProto.from_dict(tensors={"ref_log_prob": log_probs[own_rows]})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @DistProfiler.annotate(optimizer_attr="actor_optimizer")
    def update_actor(self, data: DataProto) -> DataProto:
        assert self._is_actor, f"update_actor called on a worker with role {self.role!r}"
        data.meta_info.setdefault("temperature", self.config.rollout.temperature)
        # the SP group trains on its rows together; this rank's own chunk is its share of the work (MFU)
        group_data, _ = self._sp_gather(data)
        start = time.perf_counter()
        metrics = self.actor.update_policy(group_data)
        self.actor_lr_scheduler.step()
        metrics["actor/lr"] = self.actor_lr_scheduler.get_last_lr()[0]
        seconds = time.perf_counter() - start
        metrics["perf/update_actor_s"] = seconds
        metrics.update(self._perf_metrics("actor", data, seconds, self._ppo_epochs))
        return DataProto(meta_info={"metrics": metrics})

    # -- state ----------------------------------------------------------------------------------------------------

    def _checkpoint_manager(self):
        """One manager per worker; the actor's module, optimizer and schedule (a rollout-only role saves weights)."""
        from verl.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

        if not hasattr(self, "actor_module"):
            raise RuntimeError(f"save/load_checkpoint called on a worker with role {self.role!r}: only the actor's "
                               "weights are checkpointed (the reference policy is frozen)")
        if getattr(self, "_ckpt_manager", None) is None:
            self._ckpt_manager = FSDPCheckpointManager(
                self.actor_module, getattr(self, "actor_optimizer", None), getattr(self, "actor_lr_scheduler", None),
                # a VLM's processor (image processor, tokenizer, chat template) so its HF folder loads as one
                self._checkpoint_processing_class(), self.config.actor.checkpoint,
                adapter=adapter_io(self.actor_module),
                step_state=getattr(self, "actor", None) if self._is_actor else None)
        return self._ckpt_manager

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path: str, hdfs_path: str | None = None, global_step: int = 0,
                        max_ckpt_to_keep: int | None = None) -> None:
        self._checkpoint_manager().save_checkpoint(local_path, hdfs_path, global_step, max_ckpt_to_keep)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = False) -> None:
        self._checkpoint_manager().load_checkpoint(local_path, hdfs_path, del_local_after_load)


class CriticWorker(_FSDPWorkerBase):
    """The value model for PPO/GAE: an HF backbone with a one-output token-classification head."""

    def __init__(self, config: FSDPCriticConfig) -> None:
        """`config`: the typed FSDPCriticConfig."""
        super().__init__()
        self.config = config
        self.profiler = role_profiler(self.rank, config.profiler, "critic")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        from verl.models.loader import load_causal_lm
        from verl.workers.critic import DataParallelPPOCritic

        self._init_distributed(self.config.model.fsdp_config.fsdp_size)
        # the value head is freshly initialised: the same seed on every rank gives every rank the same head and
        # every run the same critic (a resumed run is compared against an uninterrupted one)
        self._seed(self.config.model.fsdp_config)
        self._sp = SequenceParallelRole(self.config.ulysses_sequence_parallel_size,
                                        "critic.ulysses_sequence_parallel_size")
        cfg = normalize_ppo_batch_sizes(self.config, "critic", self._dp_size)
        cfg = self._sp.scale_token_budgets(cfg, "ppo_max_token_len_per_gpu", "forward_max_token_len_per_gpu")
        fsdp_cfg = cfg.model.fsdp_config
        module, _ = load_causal_lm(cfg.model, "critic.model", dtype=self._model_dtype(fsdp_cfg, "critic.model"),
                                   value_head=True)
        module = lora_from_model_config(module, cfg.model, "critic.model", modules_to_save=["score"])
        self.critic_module = apply_fsdp2(module, fsdp_cfg, self.device_mesh,
                                         offload_activations=cfg.model.enable_activation_offload)
        self.critic_optimizer = build_optimizer(self.critic_module, cfg.optim, "critic.optim")
        self.critic_lr_scheduler = build_lr_scheduler(self.critic_optimizer, cfg.optim, "critic.optim")
        self.critic = DataParallelPPOCritic(cfg, self.critic_module, self.critic_optimizer)
        self._cfg = cfg
        self._init_perf(self.critic_module, fsdp_cfg, "critic.model")
        self._keep_host_memory_mapped()

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @DistProfiler.annotate()
    def compute_values(self, data: DataProto) -> DataProto:
        data, own_rows = self._sp_gather(data)
        data.meta_info["micro_batch_size"] = _forward_micro_batch(self._cfg, self._dp_size)
        data.meta_info["use_dynamic_bsz"] = self._cfg.use_dynamic_bsz
        data.meta_info["max_token_len"] = self._cfg.forward_max_token_len_per_gpu
        values = self.critic.compute_values(data)
        return DataProto.from_dict(tensors={"values": values[own_rows]})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @DistProfiler.annotate(optimizer_attr="critic_optimizer")
    def update_critic(self, data: DataProto) -> DataProto:
        group_data, _ = self._sp_gather(data)  # as update_actor
        start = time.perf_counter()
        metrics = self.critic.update_critic(group_data)
        self.critic_lr_scheduler.step()
        metrics["critic/lr"] = self.critic_lr_scheduler.get_last_lr()[0]
        seconds = time.perf_counter() - start
        metrics.update(self._perf_metrics("critic", data, seconds, self._cfg.ppo_epochs))
        release_free_memory()  # the critic idles through the next rollout: do not sit on its training peak
        return DataProto(meta_info={"metrics": metrics})

    def _checkpoint_manager(self):
        from verl.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

        if getattr(self, "_ckpt_manager", None) is None:
            self._ckpt_manager = FSDPCheckpointManager(self.critic_module, self.critic_optimizer,
                                                       self.critic_lr_scheduler, self._checkpoint_tokenizer(),
                                                       self._cfg.checkpoint, adapter=adapter_io(self.critic_module),
                                                       step_state=getattr(self, "critic", None))
        return self._ckpt_manager

    def _checkpoint_tokenizer(self):
        """critic.model.tokenizer_path's tokenizer, saved with the critic so its HF folder loads on its own (the
        critic itself reads token ids and needs none)."""
        path = self._cfg.model.tokenizer_path
        if not path:
            return None
        from verl.models.loader import load_tokenizer

        return load_tokenizer(path, "critic.model.tokenizer_path", trust_remote_code=self._cfg.model.trust_remote_code)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path: str, hdfs_path: str | None = None, global_step: int = 0,
                        max_ckpt_to_keep: int | None = None) -> None:
        self._checkpoint_manager().save_checkpoint(local_path, hdfs_path, global_step, max_ckpt_to_keep)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = False) -> None:
        self._checkpoint_manager().load_checkpoint(local_path, hdfs_path, del_local_after_load)


def _actor_sequence_parallel(cfg: ActorRolloutRefConfig) -> SequenceParallelRole:
    """The policy's SP group; the reference policy in the same worker shares it (its size must match)."""
    sp, ref_sp = cfg.actor.ulysses_sequence_parallel_size, cfg.ref.ulysses_sequence_parallel_size
    if ref_sp != sp:
        raise ValueError(f"actor_rollout_ref.ref.ulysses_sequence_parallel_size ({ref_sp}) differs from "
                         f"actor_rollout_ref.actor.ulysses_sequence_parallel_size ({sp}): they share one worker's "
                         "sequence-parallel group; leave the ref's at its default (the actor's)")
    return SequenceParallelRole(sp, "actor_rollout_ref.actor.ulysses_sequence_parallel_size")


def _log_prob_micro_batch(section: RolloutConfig | RefConfig, dp_size: int) -> int | None:
    """log_prob_micro_batch_size_per_gpu; the deprecated global log_prob_micro_batch_size counts across ranks.
    None only with log_prob_use_dynamic_bsz (validation requires one of the two otherwise): token budgets then."""
    if section.log_prob_micro_batch_size_per_gpu:
        return section.log_prob_micro_batch_size_per_gpu
    if section.log_prob_micro_batch_size:
        return max(1, section.log_prob_micro_batch_size // dp_size)
    return None


def _forward_micro_batch(cfg: FSDPCriticConfig, dp_size: int) -> int:
    """critic.forward_micro_batch_size_per_gpu; the deprecated global size counts across ranks; without either,
    the (normalised) ppo_micro_batch_size_per_gpu."""
    if cfg.forward_micro_batch_size_per_gpu:
        return cfg.forward_micro_batch_size_per_gpu
    if cfg.forward_micro_batch_size:
        return max(1, cfg.forward_micro_batch_size // dp_size)
    return cfg.ppo_micro_batch_size_per_gpu


def __getattr__(name: str):
    # the reward-model worker's module imports this one, so it is loaded on first use rather than imported here
    if name == "RewardModelWorker":
        return importlib.import_module("verl.workers.reward_model_worker").RewardModelWorker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
