"""FSDP2 actor -> in-process vLLM engine: the hand-over around every rollout (verl's 3D-HybridEngine on one host).

Entering: wake the engine, gather the actor's current weights in buckets of at most
``rollout.checkpoint_engine.update_weights_bucket_megabytes`` (upstream's naive, colocated checkpoint engine), cast
to the engine's dtype before the all-gather (a collective every rank runs in the same order; a bucket's gathers are
issued together and the engine loads its first tensors while the others arrive), and stream each into the engine,
which copies it into its own (repacked) layout — so at most one bucket of full parameters exists outside the engine
at a time and nothing touches the disk. Leaving: put the KV cache to sleep so training never holds it.

A LoRA (peft) actor hands over merged weights: each adapted layer's base weight and its lora_A/lora_B are gathered
at the training dtype, merged as W + scaling * B @ A in fp32, cast to the engine's dtype and streamed under the
base model's name, so the engine runs the plain model at full speed (docs/lora.md says why not vLLM's LoRA).

With ``tensor_model_parallel_size`` > 1 the ranks of one vLLM tensor-parallel group are one engine: they gather
their prompt shards before generating and each keeps its own rows afterwards.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Shard

from verl.models.lora import is_peft_model, lora_scalings, merged_named_weights
from verl.protocol import DataProto

logger = logging.getLogger(__name__)

__all__ = ["FSDPVLLMShardingManager", "full_named_weights"]

# wrappers that prefix parameter names without being part of the HF model (torch.compile, activation checkpointing)
_WRAPPER_PREFIXES = ("_orig_mod.", "_checkpoint_wrapped_module.", "_fsdp_wrapped_module.")


def _hf_name(name: str) -> str:
    for prefix in _WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


class _Gathered:
    """A full tensor, or the all-gather that will produce it (started early so it overlaps the engine's loading)."""

    def __init__(self, param: torch.Tensor, dtype: torch.dtype | None) -> None:
        # cast the local shard first: a bf16 engine then gathers half the bytes of the fp32 master weights
        local = param.detach().to(dtype) if dtype is not None else param.detach()
        self.handle = None
        if not isinstance(local, DTensor):
            self.tensor = local
        elif local.device_mesh.ndim == 1 and local.placements[0] == Shard(0) and local.device_mesh.size() > 1:
            # FSDP2's layout: dim-0 chunks of ceil(n / world) rows, the last ones shorter or empty
            world = local.device_mesh.size()
            rows = -(-local.shape[0] // world)
            shard = local.to_local()
            if shard.shape[0] != rows:
                padded = shard.new_zeros((rows, *local.shape[1:]))
                padded[: shard.shape[0]] = shard
                shard = padded
            self.tensor = shard.new_empty((world * rows, *local.shape[1:]))
            self.handle = dist.all_gather_into_tensor(self.tensor, shard.contiguous(),
                                                      group=local.device_mesh.get_group(), async_op=True)
            self.rows = local.shape[0]
        else:  # other layouts (HSDP, TP): DTensor's own redistribution
            self.tensor = local.full_tensor()

    def result(self) -> torch.Tensor:
        if self.handle is not None:
            self.handle.wait()
            self.handle = None
            self.tensor = self.tensor[: self.rows]
        return self.tensor


def _full_bytes(param: torch.Tensor, dtype: torch.dtype | None) -> int:
    """Bytes of ``param``'s full (gathered) tensor in ``dtype`` (its own when None)."""
    return param.numel() * torch.empty((), dtype=dtype or param.dtype).element_size()


def full_named_weights(module: torch.nn.Module, dtype: torch.dtype | None, tied_lm_head: bool,
                       prefetch: int = 2, bucket_bytes: int | None = None,
                       buckets: list[tuple[int, int]] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, full tensor) for every parameter, gathered lazily. Every rank must consume the whole iterator: the
    gathers are collectives, issued in the same order everywhere. A tied parameter is gathered once and yielded under
    each of its names (vLLM expects ``lm_head.weight`` even when it is the embedding); it is appended if the module
    lists it once.

    Without ``bucket_bytes``: ``prefetch`` all-gathers in flight beyond the tensor handed over. With it (the sync's
    ``rollout.checkpoint_engine.update_weights_bucket_megabytes``): the parameters are taken in buckets of at most
    that many bytes of full tensors (a larger one is a bucket of its own); a bucket's all-gathers are issued together,
    then its tensors handed over one by one, then the next bucket starts. ``buckets`` (a list) receives
    (tensors, bytes) for each bucket."""
    params = list(module.named_parameters(remove_duplicate=False))
    uses = Counter(id(p) for _, p in params)
    started: dict[int, _Gathered] = {}
    pending: deque[tuple[str, int]] = deque()
    names = set()
    embed: torch.Tensor | None = None
    bucket = [0, 0]  # tensors and bytes of the open bucket

    def finish() -> tuple[str, torch.Tensor]:
        nonlocal embed
        hf_name, key = pending.popleft()
        tensor = started[key].result()
        uses[key] -= 1
        if uses[key] == 0:
            del started[key]
        if hf_name == "model.embed_tokens.weight" and tied_lm_head:
            embed = tensor
        return hf_name, tensor

    def close_bucket() -> Iterator[tuple[str, torch.Tensor]]:
        while pending:
            yield finish()
        if buckets is not None and bucket[0]:
            buckets.append((bucket[0], bucket[1]))
        bucket[:] = [0, 0]

    for name, param in params:
        key = id(param)
        size = 0 if key in started else _full_bytes(param, dtype)
        if bucket_bytes is not None and bucket[0] and bucket[1] + size > bucket_bytes:
            yield from close_bucket()
        if key not in started:
            started[key] = _Gathered(param, dtype)
        hf_name = _hf_name(name)
        names.add(hf_name)
        pending.append((hf_name, key))
        bucket[0] += 1
        bucket[1] += size
        while bucket_bytes is None and len(pending) > prefetch:
            yield finish()
    yield from close_bucket()
    if tied_lm_head and "lm_head.weight" not in names and embed is not None:
        yield "lm_head.weight", embed


def merged_lora_named_weights(module: torch.nn.Module, dtype: torch.dtype | None, tied_lm_head: bool,
                              scalings: dict[str, float], bucket_bytes: int | None = None,
                              buckets: list[tuple[int, int]] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """The merged plain model's (HF name, full tensor) of a peft ``module``, gathered lazily like
    ``full_named_weights`` (every rank must consume it), cast to ``dtype`` after merging."""
    names = set()
    embed = None
    stream = full_named_weights(module, None, tied_lm_head=False, bucket_bytes=bucket_bytes, buckets=buckets)
    for name, tensor in merged_named_weights(((_hf_name(n), t) for n, t in stream), scalings, dtype=dtype):
        names.add(name)
        if name == "model.embed_tokens.weight":
            embed = tensor
        yield name, tensor
    if tied_lm_head and "lm_head.weight" not in names and embed is not None:
        yield "lm_head.weight", embed


class FSDPVLLMShardingManager:
    """``bucket_megabytes``: rollout.checkpoint_engine.update_weights_bucket_megabytes (None: two gathers ahead of
    the engine, no buckets); ``last_sync_buckets``: (tensors, bytes) of each bucket of the last sync."""

    def __init__(self, module: torch.nn.Module, rollout, tp_size: int = 1, bucket_megabytes: int | None = None) -> None:
        self.module = module
        self.rollout = rollout
        self.tp_size = int(tp_size)
        self.bucket_bytes = None if bucket_megabytes is None else int(bucket_megabytes) * 2**20
        self.last_sync_buckets: list[tuple[int, int]] = []
        dtype = rollout.engine_kwargs.get("dtype", "auto")
        self.engine_dtype = getattr(torch, dtype) if dtype != "auto" else getattr(rollout.model_hf_config, "dtype", None)
        self.tied_lm_head = bool(getattr(rollout, "tied_embeddings", False))
        self.lora_scalings = lora_scalings(module) if is_peft_model(module) else None
        self.last_sync_s = 0.0

    def __enter__(self) -> FSDPVLLMShardingManager:
        self.rollout.wake_up_weights()
        self.sync_weights()
        self.rollout.wake_up()
        return self

    def __exit__(self, *exc) -> None:
        # free the KV cache even when the rollout failed: the trainer may still want the memory
        self.rollout.sleep()

    def sync_weights(self) -> float:
        """Push the actor's current weights into the engine; returns the seconds it took (gather + load)."""
        start = time.perf_counter()
        buckets: list[tuple[int, int]] = []
        with torch.no_grad():
            if self.lora_scalings is not None:
                weights = merged_lora_named_weights(self.module, self.engine_dtype, self.tied_lm_head,
                                                    self.lora_scalings, self.bucket_bytes, buckets)
            else:
                weights = full_named_weights(self.module, self.engine_dtype, self.tied_lm_head,
                                             bucket_bytes=self.bucket_bytes, buckets=buckets)
            self.rollout.update_weights(weights)
        self.last_sync_s = time.perf_counter() - start
        self.last_sync_buckets = buckets
        logger.debug("weight sync into vLLM took %.3fs in %d bucket(s)", self.last_sync_s, len(buckets))
        return self.last_sync_s

    # -- data across a vLLM tensor-parallel group -----------------------------------------------------------------

    def _tp_group(self):
        from vllm.distributed.parallel_state import get_tp_group

        group = get_tp_group()
        return group.cpu_group, group.rank_in_group

    def preprocess_data(self, data: DataProto) -> DataProto:
        """TP > 1: every rank of the group submits the group's whole batch (one engine, identical inputs)."""
        if self.tp_size <= 1:
            return data
        group, _ = self._tp_group()
        parts: list[DataProto | None] = [None] * self.tp_size
        dist.all_gather_object(parts, data, group=group)
        return DataProto.concat(parts)

    def postprocess_data(self, data: DataProto) -> DataProto:
        if self.tp_size <= 1:
            return data
        _, rank = self._tp_group()
        return data.chunk(self.tp_size)[rank]
