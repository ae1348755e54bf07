"""``actor_rollout_ref.rollout.engine_kwargs``: free-form per-engine settings, checked before Ray.

Each engine reads only its own section, so a section for another engine than ``rollout.name`` would be ignored:
it is refused. The vLLM section goes to ``vllm.LLM``; a name vLLM's EngineArgs do not have would fail only once the
engine starts in a worker, so it is named here (where vLLM is installed). Upstream's VLM recipes pass
``disable_mm_preprocessor_cache``, which vLLM replaced by ``mm_processor_cache_gb`` (0 disables the cache):
``verl.workers.rollout.vllm.engine.vllm_engine_kwargs`` translates it, so it is accepted here. A null value is
vLLM's default (the name is dropped, as upstream drops it), so older yamls' ``swap_space: null`` runs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["check_rollout_engine_kwargs", "VLLM_RENAMED"]

KEY = "actor_rollout_ref.rollout.engine_kwargs"
# upstream's name -> what vLLM takes now (the translation lives in the engine's kwargs builder)
VLLM_RENAMED = {"disable_mm_preprocessor_cache": "mm_processor_cache_gb"}


def _vllm_engine_fields() -> set[str] | None:
    try:
        from vllm.engine.arg_utils import EngineArgs
    except Exception:  # noqa: BLE001 - vLLM absent or unusable here: the worker's import names the problem
        return None
    return {f.name for f in dataclasses.fields(EngineArgs)}


def check_rollout_engine_kwargs(rollout: Any) -> list[str]:
    engine_kwargs = dict(rollout.engine_kwargs or {})
    problems = []
    for engine, section in sorted(engine_kwargs.items()):
        if engine == "trtllm" and any(v is not None for v in dict(section or {}).values()):
            problems.append(f"{KEY}.trtllm is read by upstream's TensorRT-LLM rollout only, which needs NVIDIA GPUs "
                            "and TensorRT-LLM and is not built here; remove it (leave engine_kwargs.trtllm empty) and "
                            "put vLLM options under engine_kwargs.vllm")
        elif any(v is not None for v in dict(section or {}).values()) and engine != rollout.name:
            problems.append(f"{KEY}.{engine} is read by the {engine} engine only, and rollout.name={rollout.name} "
                            f"would ignore it; remove it or set actor_rollout_ref.rollout.name={engine}")
    vllm_section = engine_kwargs.get("vllm") or {}
    fields = _vllm_engine_fields() if rollout.name == "vllm" and vllm_section else None
    if fields is not None:
        # a null value is dropped before vllm.LLM (upstream: "None means vLLM's default"), so any name may be null
        unknown = sorted(k for k, v in vllm_section.items() if v is not None and k not in fields
                         and k not in VLLM_RENAMED)
        if unknown:
            problems.append(f"{KEY}.vllm.{unknown[0]}: vllm.LLM has no such argument in the installed vLLM (unknown: "
                            f"{unknown}); see vllm.engine.arg_utils.EngineArgs for the names it takes")
    return problems
