"""Dispatch functions (driver args -> per-rank args) and collect functions (per-rank outputs -> one result).

Convention shared with custom dispatch modes: `dispatch_fn(worker_group, *args, **kwargs) -> (args, kwargs)` where
an argument meant to differ per rank is a list of length world_size; `collect_fn(worker_group, outputs)` gets the
list of per-rank outputs (or of Ray ObjectRefs when the call is non-blocking).

DP_COMPUTE_PROTO pads its DataProtos so that every rank gets an equal chunk; the pad size travels back to the
worker group under PAD_SIZE_KWARG (removed before the workers are called) so the concatenated result is unpadded.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
from tensordict import TensorDict

from verl.single_controller.base.modes import Dispatch
from verl.utils import tensordict_utils as tu

PAD_SIZE_KWARG = "__verl_dispatch_pad_size"


def dispatch_one_to_all(worker_group, *args, **kwargs):
    n = worker_group.world_size
    return tuple([a] * n for a in args), {k: [v] * n for k, v in kwargs.items()}


def dispatch_all_to_all(worker_group, *args, **kwargs):
    return args, kwargs


def collect_all_to_all(worker_group, outputs: list) -> list:
    return outputs


def collect_rank_zero(worker_group, outputs: list) -> Any:
    return outputs[0]


def dispatch_dp_compute(worker_group, *args, **kwargs):
    n = worker_group.world_size
    for where, value in _named_args(args, kwargs):
        if not isinstance(value, (list, tuple)) or len(value) != n:
            raise TypeError(
                f"Dispatch.DP_COMPUTE expects every argument to be a list of {n} items (one per rank); "
                f"argument {where} is {type(value).__name__}"
                + (f" of length {len(value)}" if isinstance(value, (list, tuple)) else "")
            )
    return tuple(list(a) for a in args), {k: list(v) for k, v in kwargs.items()}


def collect_dp_compute(worker_group, outputs: list) -> list:
    if len(outputs) != worker_group.world_size:
        raise RuntimeError(f"expected {worker_group.world_size} per-rank outputs, got {len(outputs)}")
    return outputs


def dispatch_dp_compute_data_proto(worker_group, *args, **kwargs):
    return split_data_protos(worker_group.world_size, args, kwargs, mode="DP_COMPUTE_PROTO")


def dispatch_dp_compute_data_proto_with_func(worker_group, *args, **kwargs):
    if not args or not callable(args[0]):
        raise TypeError(
            "Dispatch.DP_COMPUTE_PROTO_WITH_FUNC expects a function as the first argument, "
            f"got {type(args[0]).__name__ if args else 'no arguments'}"
        )
    func, rest = args[0], args[1:]
    split_args, split_kwargs = split_data_protos(
        worker_group.world_size, rest, kwargs, mode="DP_COMPUTE_PROTO_WITH_FUNC"
    )
    return ([func] * worker_group.world_size, *split_args), split_kwargs


def collect_dp_compute_data_proto(worker_group, outputs: list):
    """Concatenate per-rank DataProtos, or per-rank ObjectRefs into one DataProtoFuture (non-blocking calls)."""
    import ray

    from verl.protocol import DataProto, DataProtoFuture

    outputs = collect_dp_compute(worker_group, outputs)
    if all(isinstance(o, ray.ObjectRef) for o in outputs):
        return DataProtoFuture.concat(outputs)
    bad = [(rank, type(o).__name__) for rank, o in enumerate(outputs) if not isinstance(o, DataProto)]
    if bad:
        raise TypeError(
            f"a DP_COMPUTE_PROTO method must return a DataProto on every rank; got {bad} (rank, type). "
            "Return a DataProto, or register the method with Dispatch.DP_COMPUTE_METRIC for other values."
        )
    return DataProto.concat(outputs)


def split_data_protos(world_size: int, args: tuple, kwargs: dict, mode: str) -> tuple[tuple, dict]:
    """Chunk every DataProto/DataProtoFuture argument into world_size pieces, padding DataProtos first."""
    from verl.protocol import DataProto, DataProtoFuture, pad_dataproto_to_divisor

    lengths: dict[str, int] = {}
    for where, value in _named_args(args, kwargs):
        if not isinstance(value, (DataProto, DataProtoFuture)):
            raise TypeError(
                f"Dispatch.{mode} splits every argument into {world_size} chunks, so each must be a DataProto or "
                f"DataProtoFuture; argument {where} is a {type(value).__name__}. Put other values in "
                "DataProto.meta_info, or register the method with Dispatch.ONE_TO_ALL."
            )
        if isinstance(value, DataProto):
            lengths[where] = len(value)
    if len(set(lengths.values())) > 1:
        raise ValueError(f"Dispatch.{mode}: all DataProto arguments must have the same length, got {lengths}")
    pad_size = (-next(iter(lengths.values()))) % world_size if lengths else 0
    carried = {_carried_pad(v, world_size) for v in (*args, *kwargs.values()) if isinstance(v, DataProtoFuture)}
    keep_future_padding = False
    if len(carried) == 1 and None not in carried:
        # Futures padded by a same-sized group are split with their padding (which then comes off this call's
        # result), as long as that is the padding the concrete DataProtos get too.
        (carried_pad,) = carried
        if not lengths or carried_pad == pad_size:
            pad_size, keep_future_padding = carried_pad, True

    def split(value):
        if pad_size and isinstance(value, DataProto):
            value, _ = pad_dataproto_to_divisor(value, world_size)
        elif keep_future_padding and isinstance(value, DataProtoFuture):
            value = DataProtoFuture(collect_fn=value.collect_fn.keywords["collect_fn"], futures=value.futures)
        return value.chunk(world_size)

    split_args = tuple(split(a) for a in args)
    split_kwargs = {k: split(v) for k, v in kwargs.items()}
    if pad_size:
        split_kwargs[PAD_SIZE_KWARG] = pad_size
    return split_args, split_kwargs


def unpad_result(result: Any, pad_size: int) -> Any:
    """Drop the pad rows from a collected DataProto, TensorDict or DataProtoFuture; other results (per-rank
    lists) stay."""
    if not pad_size:
        return result
    from verl.protocol import DataProto, DataProtoFuture, unpad_dataproto

    if isinstance(result, DataProto):
        return unpad_dataproto(result, pad_size)
    if isinstance(result, TensorDict):
        return tu.unpad(result, pad_size)
    if isinstance(result, DataProtoFuture):
        return DataProtoFuture(
            collect_fn=functools.partial(_concat_and_unpad, collect_fn=result.collect_fn, pad_size=pad_size),
            futures=result.futures,
            dispatch_fn=result.dispatch_fn,
        )
    return result


def _carried_pad(future, world_size: int) -> int | None:
    """The pad a non-blocking DP call left on `future`, when its padded rows split evenly over world_size ranks.

    Its padded length is a multiple of the producing group's size; with the same number of ranks (the usual case:
    roles of one pool) the next call can take the padded rows as they are, so the padding carries through a chain
    of futures. Otherwise None: the future is split unpadded, which needs its length to divide evenly.
    """
    fn = future.collect_fn
    if future.dispatch_fn is None and isinstance(fn, functools.partial) and fn.func is _concat_and_unpad:
        if len(future.futures) == world_size:
            return fn.keywords["pad_size"]
    return None


def _concat_and_unpad(outputs: list, collect_fn: Callable, pad_size: int):
    return unpad_result(collect_fn(outputs), pad_size)


def _named_args(args: tuple, kwargs: dict):
    for i, a in enumerate(args):
        yield f"#{i}", a
    for k, v in kwargs.items():
        yield repr(k), v


# -- nd compute: a mesh where several ranks share one data-parallel rank -------------------------------------------


def make_nd_compute_dataproto_dispatch_fn(mesh_name: str) -> dict[str, Callable]:
    """A custom dispatch mode for ``@register``: each rank gets the chunk of its data-parallel rank on mesh
    ``mesh_name`` (ranks of one DP rank, e.g. tensor-parallel peers, get the same chunk), and only the ranks that
    registered ``is_collect=True`` are gathered. Workers declare their place with
    ``Worker._register_dispatch_collect_info(mesh_name, dp_rank, is_collect)``; the group asks them once per mesh.
    Arguments are DataProtos, DataProtoFutures or TensorDicts (padded to a multiple of the DP size)."""
    return {
        "dispatch_fn": functools.partial(dispatch_nd_compute_data_proto, mesh_name),
        "collect_fn": functools.partial(collect_nd_compute_data_proto, mesh_name),
    }


def _mesh_info(worker_group, mesh_name: str, cache_name: str, query_name: str) -> list:
    cache = getattr(worker_group, cache_name)
    if mesh_name not in cache:
        info = list(getattr(worker_group, query_name)(mesh_name))
        if len(info) != worker_group.world_size:
            raise RuntimeError(f"mesh {mesh_name!r}: {len(info)} ranks answered {query_name}, expected {worker_group.world_size}")
        cache[mesh_name] = info
    return cache[mesh_name]


def _split_tensordicts(chunks: int, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    lengths = {len(v) for v in (*args, *kwargs.values())}
    if len(lengths) > 1:
        raise ValueError(f"nd dispatch: all TensorDict arguments must have the same length, got {sorted(lengths)}")

    def split(td: TensorDict) -> list[TensorDict]:
        padded, _ = tu.pad_to_divisor(td, chunks)
        size = len(padded) // chunks
        return [tu.index_select_tensor_dict(padded, torch.arange(i * size, (i + 1) * size)) for i in range(chunks)]

    pad_size = (-lengths.pop()) % chunks if lengths else 0
    split_kwargs = {k: split(v) for k, v in kwargs.items()}
    if pad_size:
        split_kwargs[PAD_SIZE_KWARG] = pad_size
    return tuple(split(a) for a in args), split_kwargs


def dispatch_nd_compute_data_proto(mesh_name: str, worker_group, *args, **kwargs):
    dp_ranks = _mesh_info(worker_group, mesh_name, "_dispatch_info", "_query_dispatch_info")
    dp_size = max(dp_ranks) + 1
    values = (*args, *kwargs.values())
    if values and all(isinstance(v, TensorDict) for v in values):
        split_args, split_kwargs = _split_tensordicts(dp_size, args, kwargs)
    else:
        split_args, split_kwargs = split_data_protos(dp_size, args, kwargs, mode=f"nd compute on mesh {mesh_name!r}")
    pad_size = split_kwargs.pop(PAD_SIZE_KWARG, 0)
    per_rank_args = tuple([chunks[r] for r in dp_ranks] for chunks in split_args)
    per_rank_kwargs = {k: [chunks[r] for r in dp_ranks] for k, chunks in split_kwargs.items()}
    if pad_size:
        per_rank_kwargs[PAD_SIZE_KWARG] = pad_size
    return per_rank_args, per_rank_kwargs


def concat_outputs(outputs: list):
    """One result from per-rank outputs: DataProtos or TensorDicts concatenated; Ray ObjectRefs (a non-blocking
    call) become a DataProtoFuture that concatenates once they resolve."""
    import ray

    from verl.protocol import DataProto, DataProtoFuture

    if outputs and all(isinstance(o, ray.ObjectRef) for o in outputs):
        return DataProtoFuture(collect_fn=concat_outputs, futures=list(outputs))
    if outputs and all(isinstance(o, DataProto) for o in outputs):
        return DataProto.concat(outputs)
    if outputs and all(isinstance(o, TensorDict) for o in outputs):
        return tu.concat_tensordict(outputs)
    raise TypeError(f"cannot concatenate per-rank outputs of types {sorted({type(o).__name__ for o in outputs})}; "
                    "return a DataProto or a TensorDict on every collected rank")


def collect_nd_compute_data_proto(mesh_name: str, worker_group, outputs: list):
    mask = _mesh_info(worker_group, mesh_name, "_collect_info", "_query_collect_info")
    return concat_outputs([o for o, keep in zip(outputs, mask) if keep])


DISPATCH_MODE_FN_REGISTRY: dict[Dispatch, dict[str, Callable]] = {
    Dispatch.RANK_ZERO: {"dispatch_fn": dispatch_one_to_all, "collect_fn": collect_rank_zero},
    Dispatch.ONE_TO_ALL: {"dispatch_fn": dispatch_one_to_all, "collect_fn": collect_all_to_all},
    Dispatch.ALL_TO_ALL: {"dispatch_fn": dispatch_all_to_all, "collect_fn": collect_all_to_all},
    Dispatch.DP_COMPUTE: {"dispatch_fn": dispatch_dp_compute, "collect_fn": collect_dp_compute},
    Dispatch.DP_COMPUTE_PROTO: {
        "dispatch_fn": dispatch_dp_compute_data_proto,
        "collect_fn": collect_dp_compute_data_proto,
    },
    Dispatch.DP_COMPUTE_PROTO_WITH_FUNC: {
        "dispatch_fn": dispatch_dp_compute_data_proto_with_func,
        "collect_fn": collect_dp_compute_data_proto,
    },
    Dispatch.DP_COMPUTE_METRIC: {"dispatch_fn": dispatch_dp_compute_data_proto, "collect_fn": collect_dp_compute},
}


def get_predefined_dispatch_fn(dispatch_mode: Dispatch | dict) -> dict[str, Callable]:
    """{"dispatch_fn", "collect_fn"} for a Dispatch member, or the user's own dict as given."""
    if isinstance(dispatch_mode, Dispatch):
        return DISPATCH_MODE_FN_REGISTRY[dispatch_mode]
    return {"dispatch_fn": dispatch_mode["dispatch_fn"], "collect_fn": dispatch_mode["collect_fn"]}
