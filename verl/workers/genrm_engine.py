"""A reward model on its own engine (``reward_model.rollout.*``): upstream's RewardModelManager.

``GenRMServer`` loads ``reward_model.model.path`` into an engine (``reward_model.rollout.name``: ``hf``, HF generate
through the HF rollout; ``vllm``, the in-process vLLM engine of the vLLM rollout) and serves it as an
OpenAI-compatible chat endpoint (verl.workers.rollout.chat_server) on the host's loopback; a discriminative reward
model is served behind vLLM's ``/classify`` instead (an HF forward, or vLLM's pooling runner).
``RewardModelManager`` runs ``num_replicas`` of them, each in a Ray actor of its own (one CPU; with
``reward_model.enable_resource_pool`` one of its ``n_gpus_per_node x nnodes`` devices; on a GPU machine without it,
a share of the actor's GPU, asleep while the actor trains), with the reward router
(verl.workers.rollout.reward_router) in front when there are several, and hands the router's ``host:port`` (the one
server's) to the reward functions as ``reward_router_address``, with the judge's tokenizer as
``reward_model_tokenizer`` (upstream's arguments): ``GenRMEndpoint`` carries both into every process that scores.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
from typing import Any

from verl.workers.rollout.agent_loop.backends import HFBackend, VLLMBackend
from verl.workers.rollout.agent_loop.server import seeded_global_generator
from verl.workers.rollout.chat_server import ChatCompletionServer, ScoredTokenOutput

logger = logging.getLogger(__name__)

__all__ = ["GenRMEndpoint", "GenRMServer", "RewardModelManager", "bind_reward_router", "colocates"]


class JudgeHFBackend(HFBackend):
    """The agent loop's HF backend, with each batch's ``top_p`` / ``top_k`` / ``seed`` taken from its requests (the
    agent loop takes them from the rollout section): requests that differ in any of them are generated apart.

    A request with ``logprobs: k`` (the chat server's top_logprobs) gets a ScoredTokenOutput: after generate, one
    forward pass of the batch's prompt + answer (left-padded, with the mask's position ids) gives the raw logits at
    every generated position (only those positions go through the LM head); their log-softmax is reported, before
    temperature or top-k/top-p, as vLLM's default ``raw_logprobs`` mode does."""

    reports_top_logprobs = True

    def __init__(self, rollout: Any, meta: dict[str, Any], prompt_length: int) -> None:
        super().__init__(rollout, meta, prompt_length)
        self.base_config = rollout.config
        self._awake_device: Any = None  # where the weights live while awake (set while asleep)

    def sleep(self) -> None:
        """Free the judge's device memory while the actor trains: the weights (and buffers) to host memory, the
        static-cache decoder (its KV cache and CUDA graphs; rebuilt from the module on the next generate) dropped,
        the CUDA cache emptied. HF generate's own KV cache lives only during a generate call."""
        import gc

        import torch

        if self._awake_device is not None:
            return
        module = self.rollout.module
        self._awake_device = next(module.parameters()).device
        module.to("cpu")
        if getattr(self.rollout, "_decoder", None) is not None:
            self.rollout._decoder = None  # holds a device copy of the weights and the static KV cache
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def wake_up(self) -> None:
        """The weights back on the device they were on before ``sleep()``."""
        if self._awake_device is None:
            return
        self.rollout.module.to(self._awake_device)
        self._awake_device = None

    @staticmethod
    def _settings(params: dict[str, Any]) -> tuple:
        return (params.get("temperature"), params.get("top_p"), params.get("top_k"), params.get("logprobs"),
                params.get("seed"))

    def step(self) -> list:
        """One batch; a batch that fails is answered with its error and the engine goes on serving the others."""
        if not self.queue:
            return []
        pending = list(self.queue)
        params = pending[0].sampling_params
        self.rollout.config = dataclasses.replace(self.base_config, top_p=float(params.get("top_p", 1.0)),
                                                  top_k=int(params.get("top_k", -1)))
        try:
            if params.get("seed") is None:
                finished = super().step()
            else:
                with seeded_global_generator(int(params["seed"])):
                    finished = super().step()
            return self._with_logprobs(finished)
        except Exception as err:  # noqa: BLE001 - handed to every request of the batch (an HTTP 500 naming it)
            for request in pending:
                if request not in self.queue and not request.future.done():
                    request.future.set_exception(RuntimeError(f"HF generate failed: {type(err).__name__}: {err}"))
            return []


    def _with_logprobs(self, finished: list) -> list:
        """``finished`` with each request that asked for log-probs answered by a ScoredTokenOutput."""
        import torch

        from verl.utils.torch_functional import compute_position_id_with_mask

        wanted = [i for i, (request, output) in enumerate(finished)
                  if request.sampling_params.get("logprobs") is not None and output.token_ids]
        if not wanted:
            return finished
        rows = [list(finished[i][0].prompt_ids) + list(finished[i][1].token_ids) for i in wanted]
        width = max(len(row) for row in rows)
        ids = torch.full((len(rows), width), int(self.meta["pad_token_id"]), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for j, row in enumerate(rows):
            ids[j, width - len(row):] = torch.tensor(row, dtype=torch.long)
            mask[j, width - len(row):] = 1
        module = self.rollout.module
        device = next(module.parameters()).device
        # position p's logits score the token at p + 1: keep the positions before every generated token
        keep = max(len(finished[i][1].token_ids) for i in wanted) + 1
        inputs = {"input_ids": ids.to(device), "attention_mask": mask.to(device),
                  "position_ids": compute_position_id_with_mask(mask).to(device), "use_cache": False}
        with torch.no_grad():
            try:
                logits = module(**inputs, logits_to_keep=keep).logits
            except TypeError:  # a model whose forward has no logits_to_keep: every position, sliced below
                logits = module(**inputs).logits
        log_probs = torch.log_softmax(logits[:, -keep:].float(), dim=-1).cpu()
        result = list(finished)
        for j, i in enumerate(wanted):
            request, output = finished[i]
            n, k = len(output.token_ids), int(request.sampling_params["logprobs"])
            steps = log_probs[j, keep - n - 1: keep - 1]
            chosen = steps.gather(-1, torch.tensor(output.token_ids).unsqueeze(-1)).squeeze(-1).tolist()
            values, indices = steps.topk(k, dim=-1) if k else (steps[:, :0], steps[:, :0].long())
            tops = [list(zip(index_row, value_row)) for index_row, value_row in
                    zip(indices.tolist(), values.tolist())]
            result[i] = (request, ScoredTokenOutput(list(output.token_ids), chosen, output.stop_reason,
                                                    top_logprobs=tops))
        return result


class JudgeVLLMBackend(VLLMBackend):
    """The agent loop's vLLM backend, answering a request with ``logprobs: k`` by a ScoredTokenOutput: vLLM's own
    top-k log-probs of every generated step, most likely first. The judge engine runs with
    ``logprobs_mode="raw_logprobs"`` (vllm_judge_config), so these are the log-softmax of the raw logits, the values
    the HF judge backend and vLLM's OpenAI server report."""

    reports_top_logprobs = True

    def _output(self, request: Any, completion: Any, tokens: list[int], log_probs: list[float] | None,
                reason: str) -> Any:
        k = request.sampling_params.get("logprobs")
        if k is None:
            return super()._output(request, completion, tokens, log_probs, reason)
        tops = []
        for step in (completion.logprobs or [])[: len(tokens)]:
            # vLLM's dict holds the top k by rank (1 = most likely) plus the sampled token when it ranks lower
            ranked = sorted(step.items(), key=lambda item: item[1].rank)
            tops.append([(int(token_id), float(lp.logprob)) for token_id, lp in ranked if lp.rank <= int(k)][: int(k)])
        return ScoredTokenOutput(tokens, log_probs, reason, top_logprobs=tops)

    def sleep(self) -> None:
        """vLLM's ``LLM.sleep(level=1)``: weights offloaded to host memory, KV cache discarded (the engine is built
        with ``enable_sleep_mode`` when it shares the actor's GPU: vllm_judge_config)."""
        self.rollout.sleep()

    def wake_up(self) -> None:
        self.rollout.wake_up()


def _torch_dtype(name: str) -> Any:
    import torch

    names = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16,
             "half": torch.float16, "float32": torch.float32, "fp32": torch.float32, "float": torch.float32}
    return names.get(name, "auto")


def _hf_backend(rm: Any, tokenizer: Any, device: str) -> JudgeHFBackend:
    from transformers import AutoModelForCausalLM

    from verl.workers.config import RolloutConfig
    from verl.workers.rollout.hf_rollout import HFRollout

    dtype = _torch_dtype(rm.rollout.dtype)
    module = AutoModelForCausalLM.from_pretrained(rm.model.path, dtype=dtype,
                                                  trust_remote_code=rm.model.trust_remote_code).to(device)
    module.eval()
    config = RolloutConfig(name="hf", prompt_length=rm.rollout.prompt_length,
                           response_length=rm.rollout.response_length, calculate_log_probs=False)
    meta = {"eos_token_id": _eos_ids(module, tokenizer), "pad_token_id": _pad_id(tokenizer), "validate": False}
    return JudgeHFBackend(HFRollout(module, config), meta, prompt_length=1)


def vllm_judge_config(rm: Any, sleeps: bool = False) -> Any:
    """The vLLM rollout's config for the judge: reward_model.rollout's keys, weights loaded from model.path.
    ``sleeps``: the judge shares the actor's GPU and sleeps while it trains (vLLM's sleep mode on)."""
    from verl.workers.config import RolloutConfig

    vllm_kwargs = dict(rm.rollout.engine_kwargs.get("vllm") or {})
    vllm_kwargs.setdefault("enable_prefix_caching", rm.rollout.enable_prefix_caching)
    # the chat server reports log-probs before any processing, as vLLM's OpenAI server does by default
    vllm_kwargs.setdefault("logprobs_mode", "raw_logprobs")
    return RolloutConfig(name="vllm", dtype=rm.rollout.dtype, prompt_length=rm.rollout.prompt_length,
                         response_length=rm.rollout.response_length,
                         gpu_memory_utilization=rm.rollout.gpu_memory_utilization, load_format="auto",
                         free_cache_engine=sleeps, engine_kwargs={"vllm": vllm_kwargs, "sglang": {}})


def _vllm_backend(rm: Any, sleeps: bool = False) -> Any:
    from verl.workers.rollout.vllm_rollout import vLLMRollout

    rollout = vLLMRollout(rm.model.path, vllm_judge_config(rm, sleeps), trust_remote_code=rm.model.trust_remote_code)
    return JudgeVLLMBackend(rollout, {})


def _classify_server(rm: Any, tokenizer: Any, device: str) -> Any:
    """A discriminative reward model behind ``/classify`` on ``rollout.name``'s engine (HF forward or vLLM's pooling
    runner), inputs of up to prompt_length + response_length tokens."""
    from verl.workers.rollout.classify_server import ClassifyServer, HFClassifier

    if rm.rollout.name == "vllm":
        scorer = _vllm_classifier(rm)
    else:
        from verl.models.value_head import load_reward_model

        model = load_reward_model(rm.model.path, "reward_model.model.path",
                                  trust_remote_code=rm.model.trust_remote_code,
                                  dtype=_torch_dtype(rm.rollout.dtype)).to(device)
        model.eval().requires_grad_(False)
        scorer = HFClassifier(model, _pad_id(tokenizer))
    return ClassifyServer(scorer, tokenizer, [rm.model.path, "reward_model"],
                          rm.rollout.prompt_length + rm.rollout.response_length,
                          "reward_model.rollout.prompt_length + response_length")


_TOKEN_CLS, _SEQ_CLS = "ForTokenClassification", "ForSequenceClassification"


def pooling_architecture(hf_config: Any, path: str, check_vllm: bool = True) -> str:
    """The architecture vLLM's pooling runner builds for a one-label reward model at ``path``: a sequence classifier
    as is; a token classifier (upstream's reward-model format) as the sequence classifier of the same trunk, which
    reads the same weights (``model.*``, ``score.weight``, ``score.bias``) and scores the last token, as the token
    classifier's last position does. Anything else is refused, naming the key. ``check_vllm``: also ask vLLM's
    model registry whether it can build that class (imports vLLM)."""
    key = f"reward_model.model.path={path!r}"
    if getattr(hf_config, "vision_config", None) is not None:
        raise ValueError(f"{key} is a vision-language reward model; on vLLM's pooling runner only text reward "
                         "models are served here: set reward_model.rollout.name=hf")
    arch = (getattr(hf_config, "architectures", None) or [""])[0]
    if arch.endswith(_TOKEN_CLS):
        arch = arch[: -len(_TOKEN_CLS)] + _SEQ_CLS
    elif not arch.endswith(_SEQ_CLS):
        raise ValueError(f"{key} has architecture {arch or 'none'!r}, not a token- or sequence-classification "
                         "reward model (a score head with one label); point the key at one (examples/reward_model/ "
                         "builds one), or set custom_reward_function.path for a generative judge")
    labels = getattr(hf_config, "num_labels", 1)
    if labels != 1:
        raise ValueError(f"{key} has num_labels={labels}; a reward model outputs one score (train it with "
                         "num_labels=1)")
    if _has_score_head(path) is False:
        raise ValueError(f"{key} has no trained score head (score.weight is missing): it is not a reward model. "
                         "Point the key at a token- or sequence-classification checkpoint.")
    if not check_vllm:
        return arch
    from vllm import ModelRegistry

    supported = set(ModelRegistry.get_supported_archs())
    if arch not in supported and arch[: -len(_SEQ_CLS)] + "ForCausalLM" not in supported:
        raise ValueError(f"{key}: vLLM {_vllm_version()} has neither {arch} nor "
                         f"{arch[: -len(_SEQ_CLS)]}ForCausalLM to build the classifier on; set "
                         "reward_model.rollout.name=hf")
    return arch


def _vllm_version() -> str:
    import vllm

    return str(getattr(vllm, "__version__", "?"))


def _has_score_head(path: str) -> bool | None:
    """Whether the folder's safetensors hold ``score.weight`` (None: no safetensors to look in)."""
    import glob
    import os

    from safetensors import safe_open

    files = glob.glob(os.path.join(path, "*.safetensors"))
    if not files:
        return None
    for name in files:
        with safe_open(name, framework="pt") as handle:
            if "score.weight" in handle.keys():
                return True
    return False


def _vllm_classifier(rm: Any) -> Any:
    """vLLM's pooling runner (``runner="pooling"``) on ``model.path``, in this process, from the judge's keys."""
    from transformers import AutoConfig

    from verl.workers.rollout.classify_server import VLLMClassifier
    from verl.workers.rollout.vllm.engine import build_llm, engine_kwargs

    path = rm.model.path
    hf_config = AutoConfig.from_pretrained(path, trust_remote_code=rm.model.trust_remote_code)
    arch = pooling_architecture(hf_config, path)
    kwargs = engine_kwargs(vllm_judge_config(rm), path, hf_config, seed=0, engines_per_node=1,
                           trust_remote_code=rm.model.trust_remote_code)
    for generation_only in ("logprobs_mode", "generation_config", "skip_tokenizer_init"):
        kwargs.pop(generation_only, None)
    kwargs["runner"] = "pooling"
    if arch != (hf_config.architectures or [None])[0]:
        kwargs["hf_overrides"] = {**(kwargs.get("hf_overrides") or {}), "architectures": [arch]}
    return VLLMClassifier(build_llm(kwargs))


def _eos_ids(module: Any, tokenizer: Any) -> list[int]:
    ids = getattr(getattr(module, "generation_config", None), "eos_token_id", None)
    ids = ids if isinstance(ids, list) else [ids] if ids is not None else []
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    if not ids:
        raise ValueError("reward_model.model.path: the judge model has no eos token (tokenizer or generation config)")
    return ids


def _pad_id(tokenizer: Any) -> int:
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return int(pad)


class GenRMServer:
    """The judge model on its engine behind an OpenAI-compatible endpoint, in this process. ``rm``: the typed
    ``reward_model`` section; ``host``: where to listen (loopback unless the cluster spans nodes).

    ``discriminative``: ``model.path`` is a discriminative reward model (no custom reward function is set, as
    upstream decides): it is served behind vLLM's ``/classify`` (verl.workers.rollout.classify_server; on HF, or on
    vLLM's pooling runner) instead of a chat endpoint.

    ``colocated``: the judge shares the actor's GPU (upstream's colocated mode): ``sleep()`` frees its device memory
    while the actor trains, ``wake_up()`` restores it (a chat judge only; verl.workers.rollout.chat_server)."""

    def __init__(self, rm: Any, host: str = "127.0.0.1", num_threads: int | None = None,
                 start_engine: bool = True, discriminative: bool = False, colocated: bool = False) -> None:
        import torch

        from verl.models.loader import load_tokenizer

        if num_threads:
            torch.set_num_threads(int(num_threads))
        if rm.model.external_lib:
            import importlib

            importlib.import_module(rm.model.external_lib)
        self.tokenizer = load_tokenizer(rm.model.path, "reward_model.model.path",
                                        trust_remote_code=rm.model.trust_remote_code)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        if discriminative:
            self.server = _classify_server(rm, self.tokenizer, device)
            self.router_address = self.server.start(host, 0)
            logger.info("reward model (%s, /classify) for %s serving on %s", rm.rollout.name, rm.model.path,
                        self.router_address)
            return
        backend = _hf_backend(rm, self.tokenizer, device) if rm.rollout.name == "hf" else \
            _vllm_backend(rm, sleeps=colocated and device == "cuda")
        self.server = ChatCompletionServer(backend, self.tokenizer, [rm.model.path, "judge"],
                                           rm.rollout.prompt_length, rm.rollout.response_length)
        if start_engine:
            self.server.start_engine()
        self.router_address = self.server.start_http(host, 0)
        logger.info("judge engine (%s) for %s serving on %s", rm.rollout.name, rm.model.path, self.router_address)

    def address(self) -> str:
        return self.router_address

    def stats(self) -> dict[str, Any]:
        return self.server.stats()

    def sleep(self) -> None:
        """Free the judge's device memory (requests are answered HTTP 503 until ``wake_up``)."""
        if not isinstance(self.server, ChatCompletionServer):
            raise RuntimeError("a discriminative reward model's server (/classify) does not sleep")
        self.server.sleep()

    def wake_up(self) -> None:
        if isinstance(self.server, ChatCompletionServer):
            self.server.wake_up()

    def start_engine(self) -> None:
        if hasattr(self.server, "start_engine"):  # the classify server's engine starts with it
            self.server.start_engine()

    def shutdown(self) -> dict[str, Any]:
        stats = self.server.stats()
        self.server.stop()
        return stats


def num_replicas(rm: Any) -> int:
    """How many judge engines serve (upstream's rule): with its own pool, the pool's size
    (``n_gpus_per_node x nnodes``) over one engine's (``rollout.tensor_model_parallel_size``); else one."""
    if not rm.enable_resource_pool:
        return 1
    return max(1, rm.n_gpus_per_node * rm.nnodes // max(1, rm.rollout.tensor_model_parallel_size))


def colocates(rm: Any, device: str, discriminative: bool, pool: Any) -> bool:
    """Whether the judge shares the actor's GPU and sleeps while it trains (upstream's colocated mode): a chat
    judge without ``enable_resource_pool`` on a GPU machine whose actor pool holds GPUs."""
    return (device == "cuda" and not rm.enable_resource_pool and not discriminative and pool is not None
            and bool(getattr(pool, "use_gpu", False)))


def colocated_options(pool: Any) -> dict[str, Any]:
    """Ray options placing a judge replica in the actor pool's first bundle with one worker group's GPU share."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    placement, bundle = pool.placement_of_rank(0)
    share = pool.actor_resources().get("num_gpus", 0.0)
    return {"num_cpus": 0, "num_gpus": share, "scheduling_strategy": PlacementGroupSchedulingStrategy(
        placement_group=placement, placement_group_bundle_index=bundle)}


def merge_replica_stats(replicas: list[dict[str, Any]]) -> dict[str, Any]:
    """The replicas' counters as one server's: sums, but ``max_*`` the largest; ``replicas``: each one's own."""
    merged: dict[str, Any] = {}
    for stats in replicas:
        for key, value in stats.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                merged[key] = max(merged.get(key, value), value) if key.startswith("max_") else \
                    merged.get(key, 0) + value
    return {**merged, "replicas": replicas}


class RewardModelManager:
    """Upstream's name: starts the judge servers in Ray actors (``reward_model.rollout.*``) and, when there are
    several, the reward router in front of them (verl.workers.rollout.reward_router); ``get_router_address()`` is
    where the reward functions ask (the router's ``host:port``, or the one server's); ``shutdown()`` stops them and
    returns their counters. ``device``: trainer.device; ``discriminative``: serve ``model.path`` as a
    discriminative reward model (``/classify``).

    Replicas: ``num_replicas(rm)``, each a Ray actor of its own with ``tensor_model_parallel_size`` CPUs (its torch
    threads) or, on a GPU machine with ``enable_resource_pool``, as many GPUs. ``colocate_pool``: the actor's
    resource pool; on a GPU machine without ``enable_resource_pool`` a chat judge takes one worker group's share of
    a GPU (``1 / max_colocate_count``) in the bundle of the actor's rank 0 (upstream's colocated
    mode), and ``sleep()`` / ``wake_up()`` free and restore its device memory around the actor's updates."""

    def __init__(self, rm: Any, device: str = "cpu", discriminative: bool = False,
                 colocate_pool: Any = None) -> None:
        import ray

        count = num_replicas(rm)
        per_replica = max(1, rm.rollout.tensor_model_parallel_size) if rm.enable_resource_pool else 1
        use_gpu = device != "cpu" and rm.enable_resource_pool
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        self.host = "127.0.0.1" if len(nodes) <= 1 else "0.0.0.0"  # noqa: S104 - several nodes: reachable from them
        options: dict[str, Any] = {"num_cpus": per_replica, "num_gpus": per_replica if use_gpu else 0}
        self.colocated = colocates(rm, device, discriminative, colocate_pool)
        self._pool = None
        if self.colocated:
            options = colocated_options(colocate_pool)
            colocate_pool.reserve_group_slot("genrm")
            self._pool = colocate_pool
        self.actors = [ray.remote(GenRMServer).options(**options, name=f"verl_genrm_{id(self):x}_{i}").remote(
            rm, host=self.host, num_threads=per_replica, discriminative=discriminative, colocated=self.colocated)
            for i in range(count)]
        self.router = None
        self.stats: dict[str, Any] = {}
        try:
            self.replica_addresses = [self._reachable(actor, address) for actor, address in
                                      zip(self.actors, ray.get([actor.address.remote() for actor in self.actors]))]
            self.router_address = self.replica_addresses[0]
            if count > 1:
                from verl.workers.rollout.reward_router import RewardRouter

                self.router = ray.remote(RewardRouter).options(num_cpus=0, name=f"verl_reward_router_{id(self):x}") \
                    .remote(self.replica_addresses)
                self.router_address = self._reachable(self.router, ray.get(self.router.start.remote(self.host, 0)))
        except BaseException:
            self._kill()
            raise

    def _reachable(self, actor: Any, address: str) -> str:
        """``address`` as the other nodes reach it (the actor's node address when it listens on all of them)."""
        import ray

        if self.host != "0.0.0.0":  # noqa: S104
            return address
        node_ip = ray.get(actor.__ray_call__.remote(lambda _self: ray.util.get_node_ip_address()))
        return f"{node_ip}:{address.rsplit(':', 1)[1]}"

    def get_router_address(self) -> str:
        return self.router_address

    def sleep(self) -> None:
        """Colocated: every replica frees its device memory (after answering what it was asked); else nothing."""
        import ray

        if self.colocated and self.actors:
            ray.get([actor.sleep.remote() for actor in self.actors])

    def wake_up(self) -> None:
        import ray

        if self.colocated and self.actors:
            ray.get([actor.wake_up.remote() for actor in self.actors])

    def current_stats(self) -> dict[str, Any]:
        """The servers' counters (merged over the replicas, with the router's under ``router``)."""
        import ray

        if len(self.actors) == 1:
            return ray.get(self.actors[0].stats.remote())
        stats = merge_replica_stats(ray.get([actor.stats.remote() for actor in self.actors]))
        return {**stats, "router": ray.get(self.router.stats.remote())}

    def shutdown(self, timeout_s: float = 120.0) -> dict[str, Any]:
        """Stop the router and every replica; a replica that died is reported as ``{"dead": why}``."""
        import ray

        if not self.actors:
            return self.stats
        try:
            router = ray.get(self.router.stop.remote(), timeout=timeout_s) if self.router is not None else None
            replicas = []
            for actor in self.actors:
                try:
                    replicas.append(ray.get(actor.shutdown.remote(), timeout=timeout_s))
                except (ray.exceptions.RayError, TimeoutError) as err:
                    replicas.append({"dead": f"{type(err).__name__}: {str(err)[:200]}"})
            self.stats = replicas[0] if router is None else {**merge_replica_stats(replicas), "router": router}
        finally:
            self._kill()
        return self.stats

    def _kill(self) -> None:
        import ray

        for actor in [*self.actors, *([self.router] if self.router is not None else [])]:
            ray.kill(actor)
        self.actors, self.router = [], None
        if self._pool is not None:
            self._pool.release_group_slot()
            self._pool = None


class GenRMEndpoint:
    """Where the judge listens, for the reward functions: ``address`` (``host:port``, set once the server is up) and
    the judge's tokenizer (loaded on first use in each process, never pickled)."""

    def __init__(self, model_path: str | None = None, trust_remote_code: bool = False) -> None:
        self.model_path = model_path
        self.trust_remote_code = trust_remote_code
        self.discriminative = False  # serves /classify (a discriminative reward model) rather than chat
        self.address: str | None = None
        self._tokenizer = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_tokenizer": None}

    def kwargs(self) -> dict[str, Any]:
        if self.address is None:
            raise RuntimeError("the generative reward model's server is not running (reward_model.rollout.name): "
                               "the trainer starts it in init_workers(), before the first rollout is scored")
        return {"reward_router_address": self.address, "reward_model_tokenizer": self.tokenizer()}

    def tokenizer(self) -> Any:
        if self._tokenizer is None and self.model_path:
            from verl.models.loader import load_tokenizer

            self._tokenizer = load_tokenizer(self.model_path, "reward_model.model.path",
                                             trust_remote_code=self.trust_remote_code)
        return self._tokenizer


def bind_reward_router(fn: Any, endpoint: GenRMEndpoint) -> Any:
    """``fn`` called with ``reward_router_address`` and ``reward_model_tokenizer`` from ``endpoint`` at call time
    (upstream passes both to every reward function when a reward model serves). Stays a coroutine function when
    ``fn`` is one; the endpoint travels by value with the function (cloudpickle), address included."""
    target = fn
    while isinstance(target, functools.partial):
        target = target.func
    if inspect.iscoroutinefunction(target):
        async def scored_async(*args: Any, **kwargs: Any) -> Any:
            return await fn(*args, **kwargs, **endpoint.kwargs())

        scored_async.__wrapped_reward__ = fn  # type: ignore[attr-defined]
        return scored_async

    def scored(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs, **endpoint.kwargs())

    scored.__wrapped_reward__ = fn  # type: ignore[attr-defined]
    return scored
