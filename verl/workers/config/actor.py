"""The actor's and the reference policy's sections: upstream's ActorConfig / FSDPActorConfig (and McoreActorConfig,
readable but refused for training), PolicyLossConfig, and RefConfig (`actor_rollout_ref.ref`, ours: upstream keeps
that section untyped)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from verl.base_config import BaseConfig
from verl.utils.config_schema import Refusal, at_least, choice, dict_field, refused
from verl.utils.profiler.config import RoleProfilerConfig
from verl.workers.config.engine import (
    MEGATRON_REFUSAL,
    CheckpointConfig,
    FSDPEngineConfig,
    check_one_micro_batch_size,
    train_strategy,
)
from verl.workers.config.optimizer import FSDPOptimizerConfig, OptimizerConfig
from verl.workers.config.qat import QATConfig
from verl.workers.config.registries import KL_PENALTIES, LOSS_AGG_MODES, POLICY_LOSSES, policy_loss_registered

# Written after the check: the deprecated global sizes become per-GPU ones (verl.trainer.config.deprecated), and
# upstream's spellings (optim.clip_grad, tau_pos/tau_neg) are copied onto ours (verl.trainer.config.upstream_keys).
_ACTOR_FILLED_IN = frozenset({"ppo_mini_batch_size", "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu", "grad_clip", "tau_pos",
                              "tau_neg"})


@dataclass
class PolicyLossConfig(BaseConfig):
    loss_mode: str = choice("vanilla", POLICY_LOSSES, policy_loss_registered)
    clip_cov_ratio: float = 0.0002
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 0.0002
    ppo_kl_coef: float = 0.1
    # sapo gate temperatures; the yaml makes them follow upstream's actor.tau_pos / actor.tau_neg
    tau_pos: float = 1.0
    tau_neg: float = 1.05
    # upstream after v0.7: the quadratic penalty of its `dro` loss mode, -(logp * A - beta / 2 * (logp - old_logp)^2)
    dro_beta: float | None = refused(
        None, "upstream's dro policy loss (Direct Reward Optimization: a quadratic log-ratio penalty instead of "
        "the PPO clip) is not built here, so nothing would read its beta",
        "Leave it null; pick a built loss with actor_rollout_ref.actor.policy_loss.loss_mode (vanilla, gspo, "
        "cispo, sapo, ...).")


ROUTER_REPLAY_MODES = ("disabled", "R2", "R3")
_ROUTER_FILE_FIX = "Leave it null: the routing travels with each sample in the batch (routed_experts)."


@dataclass
class RouterReplayConfig(BaseConfig):
    """MoE router replay (verl.models.router_replay). R2: the old-log-prob pass records each token's top-k experts
    and the update's forwards replay them; R3: the rollout records them (rollout.enable_rollout_routing_replay)
    and both the old-log-prob pass and the update replay them."""

    mode: str = choice("disabled", ROUTER_REPLAY_MODES)
    record_file: str | None = refused(None, "writing the recorded routing to a file is not built",
                                      _ROUTER_FILE_FIX)
    replay_file: str | None = refused(None, "reading the routing to replay from a file is not built",
                                      _ROUTER_FILE_FIX)

    def __post_init__(self) -> None:
        if self.mode not in ROUTER_REPLAY_MODES:  # ValueError as upstream's RouterReplayConfig raises
            raise ValueError(f"Invalid router_replay mode: {self.mode}. Must be one of {list(ROUTER_REPLAY_MODES)}")


@dataclass
class ActorConfig(BaseConfig):
    """The PPO update of the policy, whatever engine trains it."""

    _mutable_fields = _ACTOR_FILLED_IN

    strategy: str = train_strategy("fsdp")
    rollout_n: int = at_least(1, 1)  # ${actor_rollout_ref.rollout.n} in the yaml
    ppo_mini_batch_size: int = at_least(4, 1)  # in prompts; the workers multiply by rollout.n
    ppo_micro_batch_size: int | None = at_least(None, 1)  # deprecated global size (verl.trainer.config.deprecated)
    ppo_micro_batch_size_per_gpu: int | None = at_least(2, 1)
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = at_least(16384, 1)
    # ours: a NaN/inf grad norm skips the optimizer step; this many in a row stop the run (0 or null: never)
    max_consecutive_nonfinite_grad_skips: int | None = at_least(3, 0)
    clip_ratio: float = 0.2
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float = 3.0
    loss_agg_mode: str = choice("token-mean", LOSS_AGG_MODES)
    # upstream's: the constant seq-mean-token-sum-norm divides the policy loss by (null: the padded response
    # length); refused with another loss_agg_mode, which has no such divisor
    loss_scale_factor: float | None = None
    entropy_coeff: float = 0.0
    # upstream's: the update computes the entropy (metric actor/entropy) even when entropy_coeff is 0
    calculate_entropy: bool = False
    # > 0: upstream's truncated IS, each token's loss times min(pi_old / pi_rollout, cap) (verl.algos.tis)
    tis_imp_ratio_cap: float = -1.0
    use_kl_loss: bool = False
    # upstream's copy of model.use_fused_kernels (the yaml follows it); refused as that key is
    use_fused_kernels: bool = refused(False, "the fused GPU log-prob kernels are not built (on CPU the fused "
                                      "RMSNorm/rotary are on already; VERL_FUSED_NORM_ROPE=0 turns them off)",
                                      "Set it to false.", follows="actor_rollout_ref.model.use_fused_kernels")
    # one forward per distinct prompt in each micro-batch (verl.models.prefix_grouper); padded path only
    use_prefix_grouper: bool = False
    # torch.compile of the entropy function (verl.workers.actor.entropy). Upstream's default is true; here false,
    # because the first call compiles for seconds (tens on a 2-core CPU) to fuse one small function
    use_torch_compile: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: str = choice("low_var_kl", KL_PENALTIES)
    ppo_epochs: int = at_least(1, 1)
    shuffle: bool = False
    # upstream's: seeds the mini-batch shuffle (with `shuffle`); mixed with the update's count, so each step
    # draws its own order and a run (or a resumed one) repeats them
    data_loader_seed: int | None = 42
    # a vision-language model's vision tower gets no gradient (verl.models.vision); refused for a text model
    freeze_vision_tower: bool = False
    # upstream's spelling of the sapo temperatures; policy_loss.tau_pos / tau_neg follow them in the yaml
    tau_pos: float = 1.0
    tau_neg: float = 1.05
    policy_loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    profiler: RoleProfilerConfig = field(default_factory=RoleProfilerConfig)  # verl.utils.profiler
    optim: OptimizerConfig = field(default_factory=OptimizerConfig)
    router_replay: RouterReplayConfig = field(default_factory=RouterReplayConfig)

    def __post_init__(self) -> None:
        # Upstream checks these when the object is made, so an ActorConfig built in Python fails as one built from
        # the yaml does; ValueError as upstream raises. From the yaml the builder also reports them by dotted key.
        if self.loss_agg_mode not in LOSS_AGG_MODES:
            raise ValueError(f"Invalid loss_agg_mode: {self.loss_agg_mode!r}; choose one of: "
                             f"{', '.join(LOSS_AGG_MODES)}.")
        check_one_micro_batch_size(self.use_dynamic_bsz, self.ppo_micro_batch_size,
                                   self.ppo_micro_batch_size_per_gpu, "ppo_micro_batch_size")
        if self.loss_scale_factor is not None:
            if self.loss_agg_mode != "seq-mean-token-sum-norm":
                raise ValueError(f"loss_scale_factor={self.loss_scale_factor} divides the loss only with loss_agg_mode="
                                 f"seq-mean-token-sum-norm, not {self.loss_agg_mode}; set that mode or remove it.")
            if not self.loss_scale_factor > 0:
                raise ValueError(f"loss_scale_factor must be > 0 (the loss's divisor), got {self.loss_scale_factor}")

    def validate(self, n_gpus: int, train_batch_size: int, model_config: dict | None = None) -> None:
        """Upstream's run-time check of the batch sizes against the job: raises ValueError naming the sizes.

        As upstream, only the deprecated global `ppo_micro_batch_size` is compared with n_gpus: a per-GPU size
        gives every rank at least one sample by construction."""
        if self.use_dynamic_bsz:
            return  # micro-batches are cut by token count, so no fixed size has to divide anything
        if train_batch_size < self.ppo_mini_batch_size:
            raise ValueError(f"train_batch_size ({train_batch_size}) must be >= actor.ppo_mini_batch_size "
                             f"({self.ppo_mini_batch_size}): one PPO step needs at least one full mini-batch.")
        micro = self.ppo_micro_batch_size
        if micro is None:
            return
        if self.ppo_mini_batch_size % micro != 0:
            raise ValueError(f"ppo_mini_batch_size ({self.ppo_mini_batch_size}) must be divisible by "
                             f"ppo_micro_batch_size ({micro}).")
        # a Ulysses group shares one micro-batch, so fewer samples than ranks can still keep every rank busy
        sp_size = getattr(self, "ulysses_sequence_parallel_size", 1)
        if micro * sp_size < n_gpus:
            raise ValueError(f"ppo_micro_batch_size ({micro}) * ulysses_sequence_parallel_size ({sp_size}) must be "
                             f">= n_gpus ({n_gpus}), or some ranks get no sample.")


@dataclass
class McoreActorConfig(ActorConfig):
    """Upstream's Megatron-LM actor section, so configs and code that name it still load and read back.

    Training with it is refused: the trainer builds `actor_rollout_ref.actor` as FSDPActorConfig, and a `_target_`
    naming this class stops the run before Ray starts with the `_target_refusal` below. `megatron` (upstream's
    McoreEngineConfig) is kept as the plain mapping it was given, since no engine here reads it."""

    _target_refusal: ClassVar[Refusal] = MEGATRON_REFUSAL

    strategy: str = choice("megatron", ("megatron",))
    data_loader_seed: int | None = None
    load_weight: bool = True
    megatron: dict[str, Any] = dict_field()
    profile: dict[str, Any] = dict_field()
    use_rollout_log_probs: bool = False


def _role_engine() -> FSDPEngineConfig:
    """The actor's and reference's fsdp_config: its use_torch_compile follows the role's (false here, see
    ActorConfig.use_torch_compile) through the yaml, so the built-in default agrees (verl.trainer.config.engine_mirror)."""
    return FSDPEngineConfig(use_torch_compile=False)


@dataclass
class FSDPActorConfig(ActorConfig):
    """`actor_rollout_ref.actor` trained with FSDP2: ActorConfig plus the engine's own keys."""

    grad_clip: float = 1.0
    ulysses_sequence_parallel_size: int = at_least(1, 1)  # Ulysses: verl.utils.ulysses
    entropy_from_logits_with_chunking: bool = False  # verl.workers.actor.entropy
    # upstream after v0.7: the rows per chunk of the chunked entropy (with entropy_from_logits_with_chunking)
    entropy_from_logits_chunk_size: int = at_least(2048, 1)
    entropy_checkpointing: bool = False
    # upstream after v0.7: packed micro-batches padded up to fsdp_config.pad_to_length_bucket (verl.models.packing)
    pad_to_length: bool = False
    # the log-prob pass also returns sum_v pi_v^2 per token (algorithm.adv_estimator=optimal_token_baseline)
    calculate_sum_pi_squared: bool = False
    sum_pi_squared_checkpointing: bool = False
    # upstream's dataclass default; the yaml sets it from actor_rollout_ref.model.use_remove_padding (true)
    use_remove_padding: bool = False
    # upstream's quantization-aware training: refused unless at its defaults (verl.workers.config.qat)
    qat: QATConfig = field(default_factory=QATConfig)
    optim: FSDPOptimizerConfig = field(default_factory=FSDPOptimizerConfig)
    fsdp_config: FSDPEngineConfig = field(default_factory=_role_engine)  # use_torch_compile: the role's

    def validate(self, n_gpus: int, train_batch_size: int, model_config: Mapping | None = None) -> None:
        """ActorConfig.validate, plus upstream's Ulysses rule: sequence parallelism splits the packed (unpadded)
        sequence, so with ulysses_sequence_parallel_size > 1 the model must run with use_remove_padding."""
        super().validate(n_gpus, train_batch_size, model_config)
        if self.strategy in ("fsdp", "fsdp2") and self.ulysses_sequence_parallel_size > 1:
            if model_config and not model_config.get("use_remove_padding", False):
                raise ValueError("When using sequence parallelism for actor/ref policy, you must enable "
                                 "`use_remove_padding` (actor_rollout_ref.model.use_remove_padding=true).")


@dataclass
class RefConfig(BaseConfig):
    """`actor_rollout_ref.ref`: the frozen reference policy's log-prob pass."""

    _mutable_fields = frozenset({"log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu"})
    # upstream v0.7 builds the reference section as an FSDPActorConfig; here it is this class
    _target_aliases: ClassVar[tuple[str, ...]] = ("verl.workers.config.FSDPActorConfig",
                                                  "verl.workers.config.actor.FSDPActorConfig")

    rollout_n: int = at_least(1, 1)  # ${actor_rollout_ref.rollout.n} in the yaml, as the actor's
    strategy: str = train_strategy("fsdp")
    use_remove_padding: bool = True  # ${actor_rollout_ref.model.use_remove_padding} in the yaml
    fsdp_config: FSDPEngineConfig = field(default_factory=_role_engine)  # use_torch_compile: the role's
    # as the actor's: the reference actor compiles its entropy function, which the reference pass never calls
    use_torch_compile: bool = False  # ${actor_rollout_ref.actor.use_torch_compile}
    # as the actor's (verl.workers.actor.entropy); the reference pass computes no entropy, so they change nothing
    entropy_from_logits_with_chunking: bool = False
    entropy_from_logits_chunk_size: int = at_least(2048, 1)
    entropy_checkpointing: bool = False
    pad_to_length: bool = False  # ${actor_rollout_ref.actor.pad_to_length}: as the actor's
    log_prob_micro_batch_size: int | None = at_least(None, 1)  # deprecated global size (verl.trainer.config.deprecated)
    log_prob_micro_batch_size_per_gpu: int | None = at_least(2, 1)
    log_prob_use_dynamic_bsz: bool = False
    log_prob_max_token_len_per_gpu: int = at_least(16384, 1)
    ulysses_sequence_parallel_size: int = at_least(1, 1)
    profiler: RoleProfilerConfig = field(default_factory=RoleProfilerConfig)  # verl.utils.profiler
    # R2 / R3: the reference pass replays the batch's routed_experts (verl.workers.actor.router_replay)
    router_replay: RouterReplayConfig = field(default_factory=RouterReplayConfig)
    # upstream's: None, the reference is the actor's model (actor_rollout_ref.model); {path: folder} loads a
    # different reference model from that folder (same tokenizer; verl.trainer.config.ref_model_checks)
    model: dict[str, Any] | None = None
