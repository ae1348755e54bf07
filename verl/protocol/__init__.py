"""DataProto: the one container every stage hands to the next.

A DataProto holds N rows in three parts:
- ``batch``: a ``tensordict.TensorDict`` with ``batch_size=[N]`` (tensors whose first dim is the row),
- ``non_tensor_batch``: ``dict[str, np.ndarray]`` of object arrays whose first dim is N (strings, dicts, lists),
- ``meta_info``: a plain dict shared by the whole batch (settings and results that are not per row).

Batch keys: ``verl.protocol.keys`` lists every key a PPO/GRPO step puts in ``batch`` and ``non_tensor_batch``,
with its dtype, symbolic shape, the one function that produces it and the config under which it exists
(``BATCH_KEYS``, ``expected_keys(config)``, ``check_batch(batch, config)``). Project rule: every key is produced
in exactly one place; a stage that needs a new key adds it to that table with its producer.

meta_info keys (not per row) are listed there too, in the module docstring.
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from verl.protocol.config import AUTO_PADDING_KEY, DataProtoConfig
from verl.protocol.helpers import (
    ProtocolAssertionError,
    atomic_torch_save,
    chunk_after_dispatch,
    concat_meta_info,
    existing_keys,
    index_tensor,
    iterate_mini_batches,
    to_object_array,
    union_meta_info,
    union_numpy_dict,
    union_tensor_dict,
)
from verl.protocol.reshape import fold_batch_dim, unfold_batch_dim, unfold_column_chunks
from verl.protocol.safe_io import from_payload, load_payload, to_payload
from verl.protocol.serialization import (
    deserialize_single_tensor,
    deserialize_tensordict,
    serialize_single_tensor,
    serialize_tensordict,
)
from verl.protocol.tensordict_bridge import dataproto_parts_from_tensordict, dataproto_to_tensordict

__all__ = [
    "DataProto",
    "DataProtoConfig",
    "DataProtoItem",
    "DataProtoFuture",
    "ProtocolAssertionError",
    "fold_batch_dim",
    "unfold_batch_dim",
    "serialize_single_tensor",
    "deserialize_single_tensor",
    "serialize_tensordict",
    "deserialize_tensordict",
    "pad_dataproto_to_divisor",
    "unpad_dataproto",
    "collate_fn",
    "union_tensor_dict",
    "union_numpy_dict",
]


# ---------------------------------------------------------------------------------------------------------------
# DataProto
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class DataProtoItem:
    """One row of a DataProto: ``batch`` has batch_size [], non-tensors are the row's objects."""

    batch: TensorDict | None = None
    non_tensor_batch: dict = field(default_factory=dict)
    meta_info: dict = field(default_factory=dict)


@dataclass(eq=False)  # field-wise == would call bool() on a TensorDict
class DataProto:
    batch: TensorDict | None = None
    non_tensor_batch: dict[str, np.ndarray] = field(default_factory=dict)
    meta_info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.non_tensor_batch is None:
            self.non_tensor_batch = {}
        if self.meta_info is None:
            self.meta_info = {}
        self.non_tensor_batch = {k: to_object_array(k, v) for k, v in self.non_tensor_batch.items()}
        self.check_consistency()

    def check_consistency(self) -> None:
        """Raise if the parts disagree on the number of rows (the message names the key)."""
        if self.batch is not None:
            if not isinstance(self.batch, TensorDict):
                raise TypeError(f"DataProto.batch must be a tensordict.TensorDict or None, got {type(self.batch).__name__}")
            if len(self.batch.batch_size) != 1:
                raise ProtocolAssertionError(
                    f"DataProto.batch needs exactly one batch dimension (batch_size=[N]), got "
                    f"batch_size={list(self.batch.batch_size)}; fold groups into the tensors with fold_batch_dim"
                )
        if not isinstance(self.meta_info, dict):
            raise TypeError(f"DataProto.meta_info must be a dict, got {type(self.meta_info).__name__}")
        expected, source = (self.batch.batch_size[0], "batch") if self.batch is not None else (None, None)
        for key, value in self.non_tensor_batch.items():
            if not isinstance(value, np.ndarray) or value.ndim == 0:
                raise TypeError(f"non_tensor_batch[{key!r}] must be a numpy array with a row dimension")
            if expected is None:
                expected, source = value.shape[0], f"non_tensor_batch[{key!r}]"
            elif value.shape[0] != expected:
                raise ValueError(
                    f"non_tensor_batch[{key!r}] has {value.shape[0]} rows but {source} has {expected}; "
                    f"every key needs one entry per row"
                )

    # -- construction --------------------------------------------------------------------------------------------

    @classmethod
    def from_dict(
        cls,
        tensors: dict[str, torch.Tensor] | None = None,
        non_tensors: dict[str, Any] | None = None,
        meta_info: dict | None = None,
        num_batch_dims: int = 1,
        auto_padding: bool = False,
    ) -> DataProto:
        """Build from tensors (dim 0 is the row) and per-row non-tensors. ``num_batch_dims`` is upstream's
        argument and must be 1 (a DataProto has one batch dim); ``auto_padding`` lets this DataProto's
        ``chunk`` split unevenly (see ``DataProtoConfig``)."""
        if num_batch_dims != 1:
            raise ProtocolAssertionError(
                f"num_batch_dims must be 1 (a DataProto has one batch dim), got {num_batch_dims}; "
                f"keep groups as a second tensor dim (fold_batch_dim)"
            )
        tensors = tensors or {}
        batch = None
        if tensors:
            batch_size, first = None, None
            for key, tensor in tensors.items():
                if not isinstance(tensor, torch.Tensor):
                    raise TypeError(f"tensors[{key!r}] must be a torch.Tensor, got {type(tensor).__name__}; "
                                    f"put non-tensor values in non_tensors")
                if tensor.dim() < num_batch_dims:
                    raise ValueError(f"tensors[{key!r}] has {tensor.dim()} dims, fewer than num_batch_dims={num_batch_dims}")
                shape = tensor.shape[:num_batch_dims]
                if batch_size is None:
                    batch_size, first = shape, key
                elif shape != batch_size:
                    raise ValueError(
                        f"tensors[{key!r}] has batch shape {list(shape)} but tensors[{first!r}] has {list(batch_size)}; "
                        f"all tensors need the same leading {num_batch_dims} dim(s)"
                    )
            batch = TensorDict(source=dict(tensors), batch_size=batch_size)
        meta_info = dict(meta_info or {})
        if auto_padding:
            meta_info[AUTO_PADDING_KEY] = True
        return cls(batch=batch, non_tensor_batch=dict(non_tensors or {}), meta_info=meta_info)

    @classmethod
    def from_tensordict(
        cls, tensor_dict: TensorDict, meta_info: dict | None = None, num_batch_dims: int = 1
    ) -> DataProto:
        """From a TensorDict as ``to_tensordict`` makes it: tensors to ``batch``, NonTensorStacks (per-row lists)
        to ``non_tensor_batch``, NonTensorData (batch-wide values) to ``meta_info``."""
        tensors, non_tensors, meta = dataproto_parts_from_tensordict(tensor_dict, meta_info, num_batch_dims)
        return cls.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta)

    def to_tensordict(self) -> TensorDict:
        """One TensorDict: tensors as they are, each non-tensor key as a per-row list, meta_info as batch-wide
        values (``verl.utils.tensordict_utils.get`` unwraps them)."""
        return dataproto_to_tensordict(self)

    @classmethod
    def from_single_dict(cls, data: dict[str, Any], meta_info: dict | None = None, auto_padding: bool = False) -> DataProto:
        """Build from one dict: tensors go to ``batch``, numpy arrays and lists to ``non_tensor_batch``."""
        tensors, non_tensors = {}, {}
        for key, value in data.items():
            if isinstance(value, torch.Tensor):
                tensors[key] = value
            elif isinstance(value, (np.ndarray, list, tuple)):
                non_tensors[key] = value
            else:
                raise TypeError(f"data[{key!r}] is a {type(value).__name__}; expected a torch.Tensor, numpy array or "
                                f"list with one entry per row (put batch-wide values in meta_info)")
        return cls.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta_info, auto_padding=auto_padding)

    # -- size and indexing ---------------------------------------------------------------------------------------

    def __len__(self) -> int:
        if self.batch is not None:
            return int(self.batch.batch_size[0])
        for value in self.non_tensor_batch.values():
            return int(value.shape[0])
        return 0

    def __getitem__(self, item: Any) -> DataProtoItem | DataProto:
        if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            n = len(self)
            if not -n <= item < n:
                raise IndexError(f"row {item} out of range for a DataProto of {n} rows")
            return DataProtoItem(
                batch=self.batch[int(item)] if self.batch is not None else None,
                non_tensor_batch={k: v[item] for k, v in self.non_tensor_batch.items()},
                meta_info=self.meta_info,
            )
        if isinstance(item, slice):
            return self.slice(item.start, item.stop, item.step)
        if isinstance(item, (list, tuple, np.ndarray, torch.Tensor)):
            return self.select_idxs(item)
        raise TypeError(f"DataProto indices must be int, slice, list, numpy array or tensor, not {type(item).__name__}")

    def slice(self, start: int | None = None, end: int | None = None, step: int | None = None) -> DataProto:
        """Rows ``start:end:step`` (a view of the tensors, like Python slicing)."""
        s = slice(start, end, step)
        return type(self)(
            batch=self.batch[s] if self.batch is not None else None,
            non_tensor_batch={k: v[s] for k, v in self.non_tensor_batch.items()},
            meta_info=dict(self.meta_info),
        )

    def select_idxs(self, idxs: Any) -> DataProto:
        """Rows picked by integer indices (in that order, repeats allowed) or by a boolean mask of length N."""
        index = index_tensor(idxs, len(self))
        index_np = index.numpy()
        batch = None
        if self.batch is not None:
            batch = self.batch[index.to(self.batch.device) if self.batch.device is not None else index]
        return type(self)(
            batch=batch,
            non_tensor_batch={k: v[index_np] for k, v in self.non_tensor_batch.items()},
            meta_info=dict(self.meta_info),
        )

    # -- keys ----------------------------------------------------------------------------------------------------

    def select(
        self,
        batch_keys: list[str] | None = None,
        non_tensor_batch_keys: list[str] | None = None,
        meta_info_keys: list[str] | None = None,
        deepcopy: bool = False,
    ) -> DataProto:
        """A new DataProto with only the named keys (None keeps all of that part); tensors are shared
        unless ``deepcopy``. Key edits on the result never touch self."""
        batch = None
        if self.batch is not None:
            # TensorDict.select makes a new TensorDict, even with all keys
            batch = self.batch.select(*existing_keys(batch_keys, self.batch.keys(), "batch"))
        elif batch_keys:
            raise KeyError(f"batch has no key(s) {list(batch_keys)}: this DataProto has no tensor batch")
        non_tensors = {k: self.non_tensor_batch[k] for k in existing_keys(non_tensor_batch_keys, self.non_tensor_batch, "non_tensor_batch")}
        meta = {k: self.meta_info[k] for k in existing_keys(meta_info_keys, self.meta_info, "meta_info")}
        if deepcopy:
            batch, non_tensors, meta = copy.deepcopy(batch), copy.deepcopy(non_tensors), copy.deepcopy(meta)
        return type(self)(batch=batch, non_tensor_batch=non_tensors, meta_info=meta)

    def pop(
        self,
        batch_keys: list[str] | None = None,
        non_tensor_batch_keys: list[str] | None = None,
        meta_info_keys: list[str] | None = None,
    ) -> DataProto:
        """Remove the named keys from self and return them as a new DataProto of the same length."""
        if batch_keys and self.batch is None:
            raise KeyError(f"batch has no key(s) {list(batch_keys)}: this DataProto has no tensor batch")
        # check every part before removing anything, so a bad key leaves self unchanged
        batch_keys = existing_keys(batch_keys or [], self.batch.keys() if self.batch is not None else [], "batch")
        non_tensor_batch_keys = existing_keys(non_tensor_batch_keys or [], self.non_tensor_batch, "non_tensor_batch")
        meta_info_keys = existing_keys(meta_info_keys or [], self.meta_info, "meta_info")
        batch = None
        if self.batch is not None:
            popped = {k: self.batch.pop(k) for k in batch_keys}
            batch = TensorDict(popped, batch_size=self.batch.batch_size, device=self.batch.device)
        non_tensors = {k: self.non_tensor_batch.pop(k) for k in non_tensor_batch_keys}
        meta = {k: self.meta_info.pop(k) for k in meta_info_keys}
        return type(self)(batch=batch, non_tensor_batch=non_tensors, meta_info=meta)

    def rename(self, old_keys: str | list[str] | None = None, new_keys: str | list[str] | None = None) -> DataProto:
        """Rename batch (or non-tensor) keys in place; returns self."""
        old = [old_keys] if isinstance(old_keys, str) else list(old_keys or [])
        new = [new_keys] if isinstance(new_keys, str) else list(new_keys or [])
        if len(old) != len(new):
            raise ValueError(f"rename needs as many new keys as old keys: {old} -> {new}")
        for o, n in zip(old, new):
            if self.batch is not None and o in self.batch.keys():
                self.batch.rename_key_(o, n)
            elif o in self.non_tensor_batch:
                self.non_tensor_batch[n] = self.non_tensor_batch.pop(o)
            else:
                raise KeyError(f"cannot rename {o!r}: not a batch or non_tensor_batch key")
        return self

    def union(self, other: DataProto) -> DataProto:
        """Merge other's keys into self (in place; returns self). Shared keys must hold equal values."""
        has_rows = [d.batch is not None or bool(d.non_tensor_batch) for d in (self, other)]
        if all(has_rows) and len(self) != len(other):
            raise ValueError(f"cannot union DataProtos of different lengths: {len(self)} vs {len(other)}")
        if other.batch is not None:
            self.batch = other.batch.select(*other.batch.keys()) if self.batch is None else union_tensor_dict(self.batch, other.batch)
        union_numpy_dict(self.non_tensor_batch, other.non_tensor_batch)
        union_meta_info(self.meta_info, other.meta_info)
        self.check_consistency()
        return self

    # -- splitting and joining -----------------------------------------------------------------------------------

    def is_padding_enabled(self) -> bool:
        """Whether ``chunk`` may split unevenly: set for this DataProto (``from_dict(auto_padding=True)``) or for
        the process (``DataProtoConfig.auto_padding``, env ``VERL_AUTO_PADDING``)."""
        return bool(self.meta_info.get(AUTO_PADDING_KEY, False)) or DataProtoConfig.auto_padding

    def padding(self, padding_size: int, padding_candidate: str = "") -> None:
        """Append ``padding_size`` copies of the last row (the first with ``padding_candidate="first"``), in place."""
        if padding_size == 0:
            return
        if padding_size < 0 or len(self) == 0:
            raise ValueError(f"padding: cannot add {padding_size} rows to a DataProto of {len(self)} rows")
        row = 0 if padding_candidate == "first" else len(self) - 1
        padded = DataProto.concat([self, self.select_idxs([row] * padding_size)])
        self.batch, self.non_tensor_batch = padded.batch, padded.non_tensor_batch

    def chunk(self, chunks: int) -> list[DataProto]:
        """Split into ``chunks`` equal parts. The length must divide evenly, unless padding is enabled
        (``is_padding_enabled``): then the first ``len % chunks`` parts get one row more."""
        if not isinstance(chunks, int) or chunks < 1:
            raise ValueError(f"chunks must be a positive int, got {chunks!r}")
        n = len(self)
        if n % chunks != 0 and not self.is_padding_enabled():
            raise ProtocolAssertionError(
                f"DataProto of length {n} is not divisible by chunks={chunks} ({n} % {chunks} = {n % chunks}); "
                f"pad first with pad_dataproto_to_divisor(data, {chunks}) and unpad_dataproto(output, pad_size) after"
            )
        bounds = np.cumsum([0] + [n // chunks + (i < n % chunks) for i in range(chunks)]).tolist()
        return [self.slice(bounds[i], bounds[i + 1]) for i in range(chunks)]

    def split(self, split_size: int) -> list[DataProto]:
        """Consecutive parts of ``split_size`` rows; the last one may be shorter."""
        if not isinstance(split_size, int) or split_size < 1:
            raise ValueError(f"split_size must be a positive int, got {split_size!r}")
        return [self.slice(i, i + split_size) for i in range(0, len(self), split_size)]

    @staticmethod
    def concat(data: list[DataProto]) -> DataProto:
        """Rows of all parts in order. meta_info: each part's ``"metrics"`` (a dict, or a list of dicts) gathered
        into one dict of lists, as upstream; any other key from the first part that has it."""
        if not data:
            raise ValueError("DataProto.concat needs at least one DataProto")
        has_batch = [d.batch is not None for d in data]
        if any(has_batch) and not all(has_batch):
            raise ValueError(f"cannot concat: parts {[i for i, h in enumerate(has_batch) if not h]} have no tensor batch")
        batch = None
        if all(has_batch):
            keys = set(data[0].batch.keys())
            for i, d in enumerate(data[1:], start=1):
                if set(d.batch.keys()) != keys:
                    raise ValueError(f"cannot concat: part {i} batch keys differ from part 0 by "
                                     f"{sorted(keys.symmetric_difference(d.batch.keys()))}")
            batch = torch.cat([d.batch for d in data], dim=0)
        nt_keys = set(data[0].non_tensor_batch)
        for i, d in enumerate(data[1:], start=1):
            if set(d.non_tensor_batch) != nt_keys:
                raise ValueError(f"cannot concat: part {i} non_tensor_batch keys differ from part 0 by "
                                 f"{sorted(nt_keys.symmetric_difference(d.non_tensor_batch))}")
        non_tensors = {k: np.concatenate([d.non_tensor_batch[k] for d in data], axis=0) for k in data[0].non_tensor_batch}
        return type(data[0])(batch=batch, non_tensor_batch=non_tensors, meta_info=concat_meta_info([d.meta_info for d in data]))

    def repeat(self, repeat_times: int = 2, interleave: bool = True) -> DataProto:
        """Each row ``repeat_times`` times: interleaved (a a b b) or tiled (a b a b)."""
        if not isinstance(repeat_times, int) or repeat_times < 1:
            raise ValueError(f"repeat_times must be a positive int, got {repeat_times!r}")
        rows = torch.arange(len(self))
        return self.select_idxs(rows.repeat_interleave(repeat_times) if interleave else rows.repeat(repeat_times))

    def sample_level_repeat(self, repeat_times: list[int] | torch.Tensor | np.ndarray) -> DataProto:
        """Row i repeated ``repeat_times[i]`` times, consecutively."""
        counts = torch.as_tensor(np.asarray(repeat_times), dtype=torch.long).reshape(-1)
        if counts.numel() != len(self) or bool((counts < 0).any()):
            raise ValueError(f"repeat_times needs {len(self)} non-negative counts, got {counts.tolist()}")
        return self.select_idxs(torch.arange(len(self)).repeat_interleave(counts))

    def unfold_column_chunks(self, n_split: int, split_keys: list[str] | None = None) -> DataProto:
        """Cut the second dim of each ``split_keys`` entry into ``n_split`` row chunks; other keys are repeated
        (interleaved) to match. See ``verl.protocol.reshape``."""
        return unfold_column_chunks(self, n_split, split_keys)

    def reorder(self, indices: torch.Tensor) -> None:
        """Permute rows in place: row i becomes old row ``indices[i]``."""
        picked = self.select_idxs(indices)
        self.batch, self.non_tensor_batch = picked.batch, picked.non_tensor_batch

    def to(self, device: str | torch.device) -> DataProto:
        """Move the tensors to ``device`` (in place; returns self)."""
        if self.batch is not None:
            self.batch = self.batch.to(device)
        return self

    def make_iterator(
        self, mini_batch_size: int, epochs: int, seed: int | None = None, dataloader_kwargs: dict | None = None
    ) -> Iterator[DataProto]:
        """Mini-batches of ``mini_batch_size`` rows for ``epochs`` passes.

        ``dataloader_kwargs={"shuffle": True}`` draws a fresh permutation each epoch from one torch.Generator
        seeded by ``seed``, so the same seed gives the same sequence of mini-batches.
        """
        kwargs = dict(dataloader_kwargs or {})
        shuffle = bool(kwargs.pop("shuffle", False))
        kwargs.pop("drop_last", None)  # irrelevant: the length must divide evenly
        if kwargs:
            raise ValueError(f"make_iterator: unsupported dataloader_kwargs {sorted(kwargs)}; supported: shuffle, drop_last")
        n = len(self)
        if not isinstance(mini_batch_size, int) or mini_batch_size < 1 or n % mini_batch_size != 0:
            raise ValueError(f"make_iterator: DataProto of length {n} is not divisible by mini_batch_size={mini_batch_size!r}")
        if epochs < 0:
            raise ValueError(f"make_iterator: epochs must be >= 0, got {epochs}")
        generator = torch.Generator()
        if seed is not None:
            generator.manual_seed(seed)
        else:
            generator.seed()
        return iterate_mini_batches(self, mini_batch_size, epochs, shuffle, generator)

    # -- persistence and inspection ------------------------------------------------------------------------------

    def save_to_disk(self, filepath: str | os.PathLike) -> None:
        """Write atomically (temp file in the same folder, then rename) so a crash never leaves half a file, in a
        format that loads without unpickling code (``verl.protocol.safe_io``)."""
        atomic_torch_save(to_payload(self.batch, self.non_tensor_batch, self.meta_info), filepath, prefix=".dataproto-")

    @staticmethod
    def load_from_disk(filepath: str | os.PathLike) -> DataProto:
        """Read a file ``save_to_disk`` wrote, with ``torch.load(weights_only=True)``: a file that would need
        arbitrary unpickling is refused (pickle.UnpicklingError)."""
        batch, non_tensors, meta = from_payload(load_payload(filepath))
        return DataProto(batch=batch, non_tensor_batch=non_tensors, meta_info=meta)

    def get_data_info(self) -> str:
        """Keys with shapes and dtypes, one per line."""
        lines = [f"DataProto: {len(self)} rows"]
        if self.batch is not None:
            for key, value in self.batch.items():
                lines.append(f"  batch.{key}: shape={list(value.shape)} dtype={value.dtype} device={value.device}")
        for key, value in self.non_tensor_batch.items():
            lines.append(f"  non_tensor_batch.{key}: shape={list(value.shape)}")
        if self.meta_info:
            lines.append(f"  meta_info keys: {sorted(self.meta_info)}")
        return "\n".join(lines)

    def print_size(self, prefix: str = "") -> str:
        """Print (and return) the memory held by tensors and by the non-tensor arrays (pointers only)."""
        tensor_bytes = sum(v.numel() * v.element_size() for v in self.batch.values()) if self.batch is not None else 0
        non_tensor_bytes = sum(v.nbytes for v in self.non_tensor_batch.values())
        message = f"{prefix}size of tensors: {tensor_bytes / 2**30:.4f} GB, size of non_tensor_batch: {non_tensor_bytes / 2**30:.4f} GB"
        print(message)
        return message


def collate_fn(x: list[DataProtoItem]) -> DataProto:
    """Stack single rows (e.g. from ``data[i]``) back into a DataProto; meta_info from the first row."""
    if not x:
        raise ValueError("collate_fn needs at least one DataProtoItem")
    batch = torch.stack([item.batch for item in x]).contiguous() if x[0].batch is not None else None
    non_tensors = {k: to_object_array(k, [item.non_tensor_batch[k] for item in x]) for k in x[0].non_tensor_batch}
    return DataProto(batch=batch, non_tensor_batch=non_tensors, meta_info=dict(x[0].meta_info))


def pad_dataproto_to_divisor(data: DataProto, size_divisor: int) -> tuple[DataProto, int]:
    """Pad to a multiple of ``size_divisor`` by repeating rows from the start (cycling if the pad is longer
    than the data). Returns (padded, pad_size); undo with ``unpad_dataproto``."""
    if not isinstance(size_divisor, int) or size_divisor < 1:
        raise ValueError(f"size_divisor must be a positive int, got {size_divisor!r}")
    n = len(data)
    pad_size = (-n) % size_divisor
    if pad_size == 0:
        return data, 0
    if n == 0:
        raise ValueError("cannot pad an empty DataProto: there are no rows to repeat")
    padded = DataProto.concat([data, data.select_idxs(torch.arange(pad_size) % n)])
    padded.meta_info = dict(data.meta_info)  # the pad rows' copy would gather "metrics" twice
    return padded, pad_size


def unpad_dataproto(data: DataProto, pad_size: int) -> DataProto:
    """Drop the last ``pad_size`` rows added by ``pad_dataproto_to_divisor``."""
    if pad_size < 0 or pad_size > len(data):
        raise ValueError(f"pad_size must be in [0, {len(data)}], got {pad_size}")
    return data.slice(0, len(data) - pad_size) if pad_size else data


# ---------------------------------------------------------------------------------------------------------------
# DataProtoFuture
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class DataProtoFuture:
    """A DataProto still being computed by Ray workers: ``get()`` waits, collects, then dispatches.

    Lets the driver pass one stage's output straight into the next call without blocking in between.
    """

    collect_fn: Callable
    futures: list  # list[ray.ObjectRef]; ray is imported lazily so `import verl` stays light
    dispatch_fn: Callable | None = None

    @staticmethod
    def concat(data: list) -> DataProtoFuture:
        """A future of ``DataProto.concat`` over the outputs behind ``data`` (ray.ObjectRefs)."""
        return DataProtoFuture(collect_fn=DataProto.concat, futures=list(data))

    def chunk(self, chunks: int) -> list[DataProtoFuture]:
        """``chunks`` futures; the i-th resolves to the i-th chunk of the collected DataProto."""
        return [
            DataProtoFuture(
                collect_fn=self.collect_fn,
                futures=self.futures,
                dispatch_fn=functools.partial(chunk_after_dispatch, i=i, chunks=chunks, previous=self.dispatch_fn),
            )
            for i in range(chunks)
        ]

    def get(self) -> DataProto:
        import ray

        outputs = ray.get(self.futures)
        for i, output in enumerate(outputs):
            if not isinstance(output, (DataProto, TensorDict)):
                raise TypeError(f"DataProtoFuture: future {i} resolved to a {type(output).__name__}, not a DataProto "
                                f"or TensorDict")
        result = self.collect_fn(outputs)
        return self.dispatch_fn(result) if self.dispatch_fn is not None else result
