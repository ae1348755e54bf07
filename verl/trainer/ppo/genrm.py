"""The trainer's side of a generative reward model on its own engine (``reward_model.rollout.name``).

The reward functions are built before Ray starts (load_reward_manager), the judge server after (it is a Ray actor),
so they meet through one ``GenRMEndpoint`` per driver process: ``bind_genrm`` wraps the reward function so that each
call gets ``reward_router_address`` / ``reward_model_tokenizer`` from it; ``start_genrm`` (the trainer's
init_workers) starts the server and writes its address there; ``genrm_asleep`` (around the actor's updates) puts
a judge that shares the actor's GPU to sleep; ``stop_genrm`` (the end of fit) stops it.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterator
from typing import Any

from verl.utils.config_errors import RewardFunctionError
from verl.workers.genrm_engine import (
    GenRMEndpoint,
    RewardModelManager,
    bind_reward_router,
    colocates,
    pooling_architecture,
)

__all__ = ["ROUTER_KWARGS", "bind_genrm", "disrm_manager", "genrm_asleep", "genrm_enabled", "genrm_endpoint",
           "start_genrm", "stop_genrm"]

ROUTER_KWARGS = ("reward_router_address", "reward_model_tokenizer")
_ENDPOINT: dict[str, GenRMEndpoint] = {}


def genrm_enabled(config: Any) -> bool:
    rm = config.reward_model
    return bool(rm.enable and rm.rollout.name)


def genrm_endpoint(config: Any) -> GenRMEndpoint:
    """This driver's endpoint of the judge (one per process: the train and validation reward functions share it)."""
    rm = config.reward_model
    endpoint = _ENDPOINT.get("judge")
    if endpoint is None or endpoint.model_path != rm.model.path:
        endpoint = _ENDPOINT["judge"] = GenRMEndpoint(rm.model.path, rm.model.trust_remote_code)
    return endpoint


def bind_genrm(config: Any, compute_score: Any, custom: bool) -> Any:
    """``compute_score`` asking the judge: checked to take upstream's two arguments, then bound to the endpoint.
    ``custom``: it is the user's function (custom_reward_function.path or verl.train's reward_fn); without one the
    model is a discriminative reward model (``disrm_manager``)."""
    if not custom:
        raise RewardFunctionError("bind_genrm needs the user's reward function; without one, reward_model.model.path "
                                  "is a discriminative reward model scored by disrm_manager")
    _check_router_kwargs(compute_score)
    return bind_reward_router(compute_score, genrm_endpoint(config))


def disrm_manager(config: Any, tokenizer: Any) -> Any:
    """The reward loop's per-sample manager asking the discriminative reward model served on the engine (upstream:
    ``reward_model.rollout.name`` without a custom reward function: HF, or vLLM's pooling runner). Marks the
    endpoint so that ``start_genrm`` serves ``/classify`` instead of a chat endpoint."""
    from verl.workers.reward_loop.disrm import DisRMRewardManager

    rm = config.reward_model
    if rm.rollout.name == "vllm":  # what vLLM's pooling runner cannot serve is refused here, before Ray
        from transformers import AutoConfig

        try:
            hf_config = AutoConfig.from_pretrained(rm.model.path, trust_remote_code=rm.model.trust_remote_code)
            pooling_architecture(hf_config, rm.model.path, check_vllm=False)
        except (OSError, ValueError) as err:
            raise RewardFunctionError(f"reward_model.rollout.name=vllm with no custom_reward_function.path serves "
                                      f"reward_model.model.path as a discriminative reward model: {err}") from err
    endpoint = genrm_endpoint(config)
    endpoint.discriminative = True
    return DisRMRewardManager(config, tokenizer, endpoint)


def _check_router_kwargs(fn: Any) -> None:
    target = fn
    while hasattr(target, "func"):
        target = target.func
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return
    params = signature.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    missing = [name for name in ROUTER_KWARGS if name not in params]
    if missing:
        raise RewardFunctionError(
            f"custom reward function {getattr(target, '__name__', target)!r} must accept {', '.join(missing)} "
            f"(its signature is {signature}): with reward_model.rollout.name the judge's address and tokenizer are "
            "passed to every call, as upstream does. Add them (or **kwargs).")


def start_genrm(config: Any, colocate_pool: Any = None) -> RewardModelManager | None:
    """Start the judge server (when configured) and publish its address to the reward functions. ``colocate_pool``:
    the actor's resource pool, which a chat judge shares on a GPU machine without
    ``reward_model.enable_resource_pool`` (upstream's colocated mode: asleep while the actor trains, genrm_asleep)."""
    rm = config.reward_model
    if not genrm_enabled(config):
        if rm.use_reward_loop and not rm.enable:
            print("[reward] note: reward_model.use_reward_loop=true without a reward model (reward_model.enable=false):"
                  " the loop scores the reward function (rule rewards, or custom_reward_function.path) per sample, as "
                  "each rollout finishes.", flush=True)
        return None
    from verl.utils.device import get_device_name

    device = get_device_name()  # trainer.device resolved ("auto": cuda where a GPU is visible)
    endpoint = genrm_endpoint(config)
    if device == "cuda" and not rm.enable_resource_pool and not colocates(rm, device, endpoint.discriminative,
                                                                         colocate_pool):
        why = "a discriminative reward model's server (/classify) does not sleep" if endpoint.discriminative else \
            "the actor's resource pool holds no GPU"
        print(f"[reward] warning: reward_model.enable_resource_pool=false on a GPU machine: the reward model's engine "
              f"runs on one CPU ({why}, so it cannot share the actor's GPU). Set reward_model.enable_resource_pool="
              "true with reward_model.n_gpus_per_node to give it GPUs of its own.", file=sys.stderr, flush=True)
    manager = RewardModelManager(rm, device=device, discriminative=endpoint.discriminative,
                                 colocate_pool=colocate_pool)
    endpoint.address = manager.get_router_address()
    what = "reward model" if endpoint.discriminative else "judge engine"
    route = "/classify" if endpoint.discriminative else "/v1"
    replicas = len(manager.replica_addresses)
    behind = f" (router over {replicas} replicas: {', '.join(manager.replica_addresses)})" if replicas > 1 else ""
    shared = " (sharing the actor's GPU, asleep while it trains)" if manager.colocated else ""
    print(f"[reward] {what} ({rm.rollout.name}) for {rm.model.path} at http://{manager.get_router_address()}{route}"
          f"{behind}{shared}", flush=True)
    return manager


@contextlib.contextmanager
def genrm_asleep(manager: RewardModelManager | None) -> Iterator[None]:
    """Around the actor's (and critic's) updates: a judge sharing the actor's GPU sleeps (its device memory freed),
    and wakes on the way out, so that it is awake for validation and the next step's generation and scoring. Every
    other judge (its own pool, or on CPU) is untouched."""
    if manager is None or not manager.colocated:
        yield
        return
    manager.sleep()
    try:
        yield
    finally:
        manager.wake_up()


def stop_genrm(config: Any, manager: RewardModelManager | None) -> dict[str, Any]:
    """Stop the judge server; returns (and prints) its counters."""
    if manager is None:
        return {}
    try:
        stats = manager.shutdown()
    finally:
        genrm_endpoint(config).address = None
    print(f"[reward] judge engine stopped: {stats}", file=sys.stderr, flush=True)
    return stats
