"""Building the reward function the trainer calls: a reward manager plus the scoring function it uses.

`custom_reward_function.path` / `.name` load a user's compute_score from a python file; without it the
built-in `default_compute_score` picks a rule by each row's data_source.
"""

from __future__ import annotations

import functools
import inspect
import os
from types import ModuleType
from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto
from verl.rewards import default_compute_score
from verl.trainer.ppo.genrm import ROUTER_KWARGS, bind_genrm, disrm_manager, genrm_enabled
from verl.utils.config_errors import RewardFunctionError
from verl.utils.import_utils import import_file_as_module, load_extern_object
from verl.workers.reward_loop import RewardLoopManager, RewardManagerBase, get_reward_loop_manager_cls
from verl.workers.reward_manager import AbstractRewardManager, RawRewardFn, get_reward_manager_cls
from verl.workers.reward_manager.timed_scoring import TIMEOUT_FIELD


def _load_module_from_file(file_path: str) -> ModuleType:
    """Import a python file once per process under a name derived from its absolute path."""
    abs_path = os.path.abspath(os.path.expanduser(file_path))
    if not os.path.isfile(abs_path):
        raise RewardFunctionError(
            f"custom_reward_function.path={file_path!r}: no such file ({abs_path}). "
            "Point it to a python file defining your scoring function."
        )
    module = import_file_as_module(abs_path, "verl_custom_reward_")
    ship_module_by_value(module)
    return module


def ship_module_by_value(module: ModuleType) -> None:
    """Ray workers and scoring processes cannot import the user's file by our synthetic module name; have
    cloudpickle (Ray's vendored copy, and the package the reward managers' scoring pool uses) send its code."""
    import cloudpickle

    cloudpickle.register_pickle_by_value(module)
    try:
        from ray import cloudpickle as ray_cloudpickle
    except ImportError:
        return
    ray_cloudpickle.register_pickle_by_value(module)


def _check_signature(fn: Any, params: tuple[str, ...], reward_kwargs: dict, where: str) -> None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins and some C callables have no signature to check; the first call will tell
    try:
        signature.bind(**{name: None for name in params}, **reward_kwargs)
    except TypeError as exc:
        raise RewardFunctionError(
            f"{where} must accept keyword arguments ({', '.join(params)}"
            f"{', ' + ', '.join(reward_kwargs) if reward_kwargs else ''}); its signature is {signature} ({exc}). "
            "Add the missing parameters (or **kwargs)."
        ) from exc


def get_custom_reward_fn(config: Any, reward_manager: str = "naive", extra_params: tuple[str, ...] = ()
                         ) -> RawRewardFn | None:
    """The user's scoring function from custom_reward_function.path/.name, or None when no path is set.

    `config` is any typed config with a `custom_reward_function` section (the trainer's, the evaluation's). Its
    reward_kwargs are bound into the returned callable; the function's signature is checked against what
    `reward_manager` passes it.
    """
    fn_config = config.custom_reward_function
    file_path = fn_config.path
    if not file_path:
        return None
    function_name = fn_config.name
    module = _load_module_from_file(file_path)
    if not hasattr(module, function_name):
        defined = sorted(
            name for name, value in vars(module).items() if callable(value) and not name.startswith("_")
        )
        raise RewardFunctionError(
            f"custom_reward_function.name={function_name!r} is not defined in {module.__file__}; "
            f"callables there: {defined}"
        )
    raw_fn = getattr(module, function_name)
    reward_kwargs = dict(fn_config.reward_kwargs)  # free-form: the user's function's own arguments
    where = f"custom reward function {function_name!r} in {module.__file__}"
    params = get_reward_manager_cls(reward_manager).compute_score_params + tuple(extra_params)
    _check_signature(raw_fn, params, reward_kwargs, where)
    print(f"using customized reward function {function_name!r} from {module.__file__}")
    return functools.partial(raw_fn, **reward_kwargs) if reward_kwargs else raw_fn


class SandboxScore:
    """default_compute_score with reward_model.sandbox_fusion's url, concurrency cap and memory limit bound in, as
    upstream passes them. The semaphore is made where it is used (it does not pickle into a Ray task)."""

    def __init__(self, url: str, max_concurrent: int, memory_limit_mb: int) -> None:
        self.url = url
        self.max_concurrent = max_concurrent
        self.memory_limit_mb = memory_limit_mb
        self._semaphore = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_semaphore": None}

    def __call__(self, data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None,
                 **kwargs: Any) -> Any:
        if self._semaphore is None:
            import threading

            self._semaphore = threading.BoundedSemaphore(self.max_concurrent)
        return default_compute_score(data_source, solution_str, ground_truth, extra_info,
                                     sandbox_fusion_url=self.url, concurrent_semaphore=self._semaphore,
                                     memory_limit_mb=self.memory_limit_mb, **kwargs)


def _default_score(config: Any) -> RawRewardFn:
    sandbox = config.reward_model.sandbox_fusion
    if not sandbox.url:
        return default_compute_score
    return SandboxScore(sandbox.url, sandbox.max_concurrent, sandbox.memory_limit_mb)


def load_reward_manager(config: Any, tokenizer: Any, num_examine: int, compute_score: RawRewardFn | None = None,
                        **reward_kwargs: Any) -> AbstractRewardManager:
    """The reward manager named by reward_model.reward_manager of the typed PPOTrainerConfig, scoring with
    `compute_score` when given (verl.train's reward_fn, already adapted), else the custom function when one is
    configured, else default_compute_score. With reward_model.use_reward_loop, that manager inside a
    RewardLoopManager (verl.workers.reward_loop), which scores each sample on its own."""
    manager_name = config.reward_model.reward_manager
    custom = compute_score is not None
    genrm = genrm_enabled(config)  # reward_model.rollout.name: the function asks the judge engine (genrm.py)
    if compute_score is None:
        checked_as = "naive" if manager_name == "rate_limited" else manager_name
        compute_score = get_custom_reward_fn(config, checked_as, ROUTER_KWARGS if genrm else ())
        custom = compute_score is not None
        compute_score = compute_score or _default_score(config)
    if genrm and not custom:  # upstream's rule: no reward function, so model.path is a discriminative RM
        return RewardLoopManager(disrm_manager(config, tokenizer), _loop_concurrency(config.reward_model))
    if genrm:
        compute_score = bind_genrm(config, compute_score, custom)
    if manager_name == "rate_limited" or _loop_native(config) or (
            config.reward_model.use_reward_loop and manager_name == "naive" and _is_async(compute_score)):
        manager = _per_sample_manager(config, tokenizer, num_examine, compute_score, **reward_kwargs)
    else:
        manager = _batch_manager(config, tokenizer, num_examine, compute_score, **reward_kwargs)
    if not config.reward_model.use_reward_loop:
        return manager
    if _is_async(compute_score) and not isinstance(manager, RewardManagerBase):
        raise RewardFunctionError(f"custom_reward_function {config.custom_reward_function.name!r} is a coroutine "
                                  f"function; reward_model.reward_manager={manager_name!r} calls it synchronously. "
                                  "Use reward_manager=naive or rate_limited with an async function.")
    return RewardLoopManager(manager, _loop_concurrency(config.reward_model))


def _loop_concurrency(rm: Any) -> int:
    """Samples the reward loop scores at once: num_workers workers, max_concurrency_per_worker each (upstream v0.7's
    reward.max_concurrency_per_worker; 1 when a config predates the key)."""
    return int(rm.num_workers) * int(getattr(rm, "max_concurrency_per_worker", 1) or 1)


def _is_async(fn: Any) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn)


def _loop_native(config: Any) -> bool:
    rm = config.reward_model
    return rm.use_reward_loop and rm.reward_loop_source == "importlib"


def _per_sample_manager(config: Any, tokenizer: Any, num_examine: int, compute_score: RawRewardFn,
                        **reward_kwargs: Any) -> Any:
    """rate_limited, naive with an async function in the loop, or reward_loop_source=importlib's class."""
    rm = config.reward_model
    if _loop_native(config):
        cls = load_extern_object(rm.reward_loop_module_path, rm.reward_loop_class_name)
    else:
        cls = get_reward_loop_manager_cls("rate_limited")
    if isinstance(cls, type) and issubclass(cls, RewardManagerBase):
        return cls(config, tokenizer, compute_score, num_examine=num_examine,
                   reward_fn_key=config.data.reward_fn_key, **reward_kwargs)
    if not callable(cls):
        raise RewardFunctionError(f"reward_model.reward_loop_class_name={rm.reward_loop_class_name!r} in "
                                  f"{rm.reward_loop_module_path} is not a reward manager class")
    return cls(tokenizer=tokenizer, num_examine=num_examine, compute_score=compute_score,
               reward_fn_key=config.data.reward_fn_key, **reward_kwargs)


def _batch_manager(config: Any, tokenizer: Any, num_examine: int, compute_score: RawRewardFn,
                   **reward_kwargs: Any) -> AbstractRewardManager:
    manager_name = config.reward_model.reward_manager
    manager_cls = get_reward_manager_cls(manager_name)
    reward_fn_key = config.data.reward_fn_key
    kwargs = {**manager_cls.kwargs_from_config(config), **reward_kwargs}
    return manager_cls(
        tokenizer=tokenizer,
        num_examine=num_examine,
        compute_score=compute_score,
        reward_fn_key=reward_fn_key,
        **kwargs,
    )


def compute_reward(data: DataProto, reward_fn: Any) -> tuple[torch.Tensor, dict[str, Any]]:
    """(reward_tensor (bs, response_len), reward_extra_infos_dict {name: list per sample}).

    Rows an agent loop already scored (``reward_score`` -> ``rm_scores``, marked in ``__rm_scored__``) keep that
    score; the reward function scores the others (all of them, when no row was scored).

    With ``reward_model.enable`` the reward-model worker has put ``rm_scores`` on every row first
    (verl.trainer.ppo.reward_model_stage): every reward manager returns them instead of calling compute_score, so
    the model score replaces the rule score (upstream's behaviour; they are not added)."""
    scored = data.non_tensor_batch.pop("__rm_scored__", None)
    if scored is not None and not np.asarray(scored, dtype=bool).all():
        return _merge_agent_scores(data, np.asarray(scored, dtype=bool), reward_fn)
    result = reward_fn(data, return_dict=True)
    if not isinstance(result, dict) or "reward_tensor" not in result:
        raise TypeError(
            f"reward function {type(reward_fn).__name__} returned {type(result).__name__} for return_dict=True; "
            "it must return {'reward_tensor': ..., 'reward_extra_info': {...}}"
        )
    return result["reward_tensor"], dict(result.get("reward_extra_info") or {})


def _merge_agent_scores(data: DataProto, scored: np.ndarray, reward_fn: Any) -> tuple[torch.Tensor, dict[str, Any]]:
    agent_scores = data.batch["rm_scores"]
    unscored = DataProto(batch=data.batch.exclude("rm_scores"), non_tensor_batch=data.non_tensor_batch,
                         meta_info=data.meta_info)
    reward_tensor, extra = compute_reward(unscored, reward_fn)
    rows = torch.as_tensor(scored)
    reward_tensor = reward_tensor.clone()
    reward_tensor[rows] = agent_scores[rows].to(reward_tensor.dtype)
    return reward_tensor, extra


def reward_metrics(reward_extra: dict[str, Any]) -> dict[str, float]:
    """The step's reward counters: `reward/timeouts`, the samples the built-in managers scored 0 because their
    scoring ran past reward_model.scoring.timeout (from the per-sample `reward_timeout` field; absent when the
    manager scored without a limit)."""
    flags = reward_extra.get(TIMEOUT_FIELD)
    if flags is None:
        return {}
    return {"reward/timeouts": float(sum(bool(flag) for flag in flags))}


def compute_reward_async(data: DataProto, config: Any = None, tokenizer: Any = None, reward_fn: Any = None) -> Any:
    """Start compute_reward in a Ray task (reward_model.launch_reward_fn_async); returns an ObjectRef of
    (reward_tensor, reward_extra_infos_dict): `ray.get` it when the rewards are needed. Without reward_fn, the
    task builds one from the typed config and tokenizer. (Upstream's is the ray.remote function itself; here
    the call submits the task, so importing this module does not import Ray.)"""
    import ray

    return _remote_compute_reward(ray).remote(data, config, tokenizer, reward_fn)


@functools.lru_cache(maxsize=1)
def _remote_compute_reward(ray: Any) -> Any:
    @ray.remote(num_cpus=1)
    def _task(data: DataProto, config: Any, tokenizer: Any, reward_fn: Any) -> tuple[torch.Tensor, dict[str, Any]]:
        if reward_fn is None:
            if config is None or tokenizer is None:
                raise ValueError("compute_reward_async needs reward_fn, or config and tokenizer to build one")
            reward_fn = load_reward_manager(config, tokenizer, num_examine=0, **config.reward_model.reward_kwargs)
        return compute_reward(data, reward_fn)

    return _task
