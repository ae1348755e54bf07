"""Split rows into groups of near-equal token counts.

Used for dynamic batch size (micro-batches formed by a token budget instead of a row count) and by the
trainer's ``balance_batch`` (equal work per data-parallel rank). The partitioner is Karmarkar–Karp's largest
differencing method generalised to k sets: it keeps every partial solution as k running sums and repeatedly
merges the two partial solutions with the widest spread, pairing the heaviest set of one with the lightest of
the other — the differences shrink quickly and the result is usually far tighter than greedy first-fit.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import math
from collections.abc import Hashable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from tensordict import TensorDict

from verl.utils.device import get_device_name

__all__ = [
    "get_seqlen_balanced_partitions",
    "karmarkar_karp",
    "greedy_partition",
    "rearrange_micro_batches",
    "get_reverse_idx",
    "log_seqlen_unbalance",
    "ceildiv",
    "prepare_dynamic_batch",
    "restore_dynamic_batch",
    "get_group_balanced_partitions",
]


def ceildiv(a: int, b: int) -> int:
    """a / b rounded up, in integers (no float rounding for large values)."""
    return -(a // -b)


class _PartialSolution:
    """k sets of item indices with their sums, kept sorted heaviest first."""

    __slots__ = ("sets", "sums")

    def __init__(self, sets: list[list[int]], sums: list[int]) -> None:
        order = sorted(range(len(sums)), key=lambda i: -sums[i])
        self.sets = [sets[i] for i in order]
        self.sums = [sums[i] for i in order]

    @property
    def spread(self) -> int:
        return self.sums[0] - self.sums[-1]

    def merge(self, other: _PartialSolution) -> _PartialSolution:
        k = len(self.sums)
        sets = [self.sets[i] + other.sets[k - 1 - i] for i in range(k)]
        sums = [self.sums[i] + other.sums[k - 1 - i] for i in range(k)]
        return _PartialSolution(sets, sums)


def karmarkar_karp(seqlen_list: Sequence[int], k_partitions: int, equal_size: bool) -> list[list[int]]:
    """Largest differencing method for k sets. ``equal_size`` needs len % k == 0 and gives every set len/k items."""
    n = len(seqlen_list)
    order = sorted(range(n), key=lambda i: seqlen_list[i])
    seeds: list[_PartialSolution] = []
    if equal_size:
        # One item per set per seed: merges then always add one item to every set.
        for start in range(0, n, k_partitions):
            group = order[start : start + k_partitions]
            seeds.append(_PartialSolution([[i] for i in group], [seqlen_list[i] for i in group]))
    else:
        for i in order:
            sets = [[i]] + [[] for _ in range(k_partitions - 1)]
            seeds.append(_PartialSolution(sets, [seqlen_list[i]] + [0] * (k_partitions - 1)))
    tie = itertools.count()
    heap = [(-s.spread, next(tie), s) for s in seeds]
    heapq.heapify(heap)
    while len(heap) > 1:
        first = heapq.heappop(heap)[2]
        second = heapq.heappop(heap)[2]
        merged = first.merge(second)
        heapq.heappush(heap, (-merged.spread, next(tie), merged))
    return [list(s) for s in heap[0][2].sets]


def greedy_partition(seqlen_list: Sequence[int], k_partitions: int, equal_size: bool) -> list[list[int]]:
    """Longest item first into the lightest set (among sets not yet full when ``equal_size``)."""
    n = len(seqlen_list)
    capacity = n // k_partitions if equal_size else n
    sets: list[list[int]] = [[] for _ in range(k_partitions)]
    sums = [0] * k_partitions
    for i in sorted(range(n), key=lambda j: -seqlen_list[j]):
        open_sets = [j for j in range(k_partitions) if len(sets[j]) < capacity]
        target = min(open_sets, key=lambda j: (sums[j], len(sets[j])))
        sets[target].append(i)
        sums[target] += seqlen_list[i]
    return sets


def _fill_empty_sets(sets: list[list[int]], seqlen_list: Sequence[int]) -> list[list[int]]:
    # Zero-length items can leave a set empty; every micro-batch / rank needs at least one row.
    for empty in [s for s in sets if not s]:
        donor = max(sets, key=len)
        smallest = min(donor, key=lambda i: seqlen_list[i])
        donor.remove(smallest)
        empty.append(smallest)
    return sets


def get_seqlen_balanced_partitions(seqlen_list: Sequence[int], k_partitions: int, equal_size: bool,
                                   method: str = "karmarkar_karp") -> list[list[int]]:
    """Indices of ``seqlen_list`` split into ``k_partitions`` non-empty sets with near-equal sums.

    Each set is sorted ascending; sets are ordered by their smallest index, so the output is deterministic.
    """
    n = len(seqlen_list)
    if k_partitions < 1 or k_partitions > n:
        raise ValueError(f"get_seqlen_balanced_partitions: need 1 <= k_partitions <= {n} items, got {k_partitions}")
    if equal_size and n % k_partitions != 0:
        raise ValueError(f"get_seqlen_balanced_partitions: equal_size needs the item count ({n}) divisible by "
                         f"k_partitions ({k_partitions})")
    lengths = [int(x) for x in seqlen_list]
    if method == "karmarkar_karp":
        sets = karmarkar_karp(lengths, k_partitions, equal_size)
    elif method == "greedy":
        sets = greedy_partition(lengths, k_partitions, equal_size)
    else:
        raise ValueError(f"get_seqlen_balanced_partitions: unknown method {method!r}; use 'karmarkar_karp' or 'greedy'")
    sets = _fill_empty_sets(sets, lengths)
    return sorted((sorted(s) for s in sets), key=lambda s: s[0])


def _sync_max(value: int, dp_group: dist.ProcessGroup | None) -> int:
    """Max of ``value`` over the data-parallel group: FSDP ranks must run the same number of forwards."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size(dp_group) == 1:
        return value
    device = "cpu" if dist.get_backend(dp_group) == "gloo" else get_device_name()
    t = torch.tensor([value], dtype=torch.long, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=dp_group)
    return int(t.item())


def rearrange_micro_batches(batch: TensorDict, max_token_len: int, dp_group: dist.ProcessGroup | None = None,
                            same_micro_num_in_dp: bool = True,
                            min_num_micro_batch: int | None = None) -> tuple[list[TensorDict], list[list[int]]]:
    """Split ``batch`` into micro-batches of at most ``max_token_len`` real tokens (attention_mask sum) each.

    Returns the micro-batches and, for each, the row indices it took from ``batch``; restore the original row
    order of concatenated outputs with ``get_reverse_idx``. With torch.distributed initialised, the number of
    micro-batches is the max over ``dp_group`` (default: world) so every rank runs the same number of forwards.
    """
    if "attention_mask" not in batch.keys():
        raise KeyError("rearrange_micro_batches: the batch needs 'attention_mask' to count tokens per row")
    seq_lens = batch["attention_mask"].sum(dim=-1).tolist()
    n = len(seq_lens)
    if n == 0:
        raise ValueError("rearrange_micro_batches: empty batch")
    longest = max(seq_lens)
    if longest > max_token_len:
        raise ValueError(f"rearrange_micro_batches: a row has {longest} tokens but max_token_len={max_token_len}; "
                         f"raise ppo_max_token_len_per_gpu / log_prob_max_token_len_per_gpu to at least {longest}")
    k = max(1, math.ceil(sum(seq_lens) / max_token_len), min_num_micro_batch or 1)
    k = min(k, n)
    # Balanced sums can still leave one set above the budget; add sets until none is.
    while k < n:
        sets = get_seqlen_balanced_partitions(seq_lens, k, equal_size=False)
        if max(sum(seq_lens[i] for i in s) for s in sets) <= max_token_len:
            break
        k += 1
    if same_micro_num_in_dp:
        k = _sync_max(k, dp_group)
    if k > n:
        raise ValueError(f"rearrange_micro_batches: another rank needs {k} micro-batches but this rank has only {n} "
                         f"rows; give every data-parallel rank the same number of rows")
    partitions = get_seqlen_balanced_partitions(seq_lens, k, equal_size=False)
    micro_batches = [batch[torch.tensor(p, dtype=torch.long)] for p in partitions]
    return micro_batches, partitions


def get_reverse_idx(idx_map: Sequence[int]) -> list[int]:
    """Inverse permutation: if output row j came from input row idx_map[j], input row i is output row result[i]."""
    reverse = [0] * len(idx_map)
    for position, original in enumerate(idx_map):
        reverse[original] = position
    return reverse


def log_seqlen_unbalance(seqlen_list: Sequence[int], partitions: list[list[int]], prefix: str) -> dict[str, float]:
    """Token sums per partition: min / max / spread for the balanced split and for plain consecutive chunks."""
    k = len(partitions)
    n = len(seqlen_list)
    size = math.ceil(n / k)
    chunk_sums = [sum(seqlen_list[i : i + size]) for i in range(0, n, size)]
    balanced = [sum(seqlen_list[i] for i in p) for p in partitions]
    return {
        f"{prefix}/min": float(min(chunk_sums)),
        f"{prefix}/max": float(max(chunk_sums)),
        f"{prefix}/minmax_diff": float(max(chunk_sums) - min(chunk_sums)),
        f"{prefix}/balanced_min": float(min(balanced)),
        f"{prefix}/balanced_max": float(max(balanced)),
        f"{prefix}/mean": float(sum(balanced) / k),
    }


def prepare_dynamic_batch(data: Any, max_token_len: int, dp_group: dist.ProcessGroup | None = None,
                          same_micro_num_in_dp: bool = True,
                          min_num_micro_batch: int | None = None) -> tuple[list[Any], list[list[int]]]:
    """A DataProto split into micro-batches of at most ``max_token_len`` real tokens, and each one's row indices.

    The DataProto form of ``rearrange_micro_batches``: non-tensor columns follow their rows and every micro-batch
    gets its own copy of ``meta_info``. Put outputs back in the original order with ``restore_dynamic_batch``.
    """
    _, partitions = rearrange_micro_batches(data.batch, max_token_len=max_token_len, dp_group=dp_group,
                                            same_micro_num_in_dp=same_micro_num_in_dp,
                                            min_num_micro_batch=min_num_micro_batch)
    micro_batches = []
    for rows in partitions:
        micro = data.select_idxs(rows)
        micro.meta_info = copy.deepcopy(data.meta_info)
        micro_batches.append(micro)
    return micro_batches, partitions


def restore_dynamic_batch(data: torch.Tensor, batch_idx_list: list[list[int]]) -> torch.Tensor:
    """Rows of the concatenated micro-batch outputs put back in the order of the batch they were split from.

    Works for plain tensors and jagged nested tensors. The index lists must cover exactly the rows of ``data``.
    """
    order = list(itertools.chain.from_iterable(batch_idx_list))
    assert len(order) == data.shape[0], (
        f"restore_dynamic_batch: the index lists name {len(order)} rows but data has {data.shape[0]}"
    )
    reverse = get_reverse_idx(order)
    if data.is_nested:
        rows = data.unbind()
        return torch.nested.as_nested_tensor([rows[i] for i in reverse], layout=torch.jagged)
    return data[torch.tensor(reverse, dtype=torch.long, device=data.device)]


def get_group_balanced_partitions(seqlen_list: Sequence[int], uid_list: Sequence[Hashable],
                                  k_partitions: int) -> list[list[int]]:
    """Rows split into ``k_partitions`` sets of near-equal token sums, never separating rows that share a uid.

    Rows with the same uid must be consecutive (as ``rollout.n`` repeats interleave them); each run of equal
    uids is one group, and every partition gets the same number of groups. Each set is sorted ascending.
    """
    assert len(seqlen_list) == len(uid_list), (
        f"get_group_balanced_partitions: {len(seqlen_list)} lengths but {len(uid_list)} uids"
    )
    groups: list[list[int]] = []
    for i, uid in enumerate(uid_list):
        if groups and uid_list[groups[-1][0]] == uid:
            groups[-1].append(i)
        else:
            groups.append([i])
    assert len(groups) >= k_partitions, (
        f"get_group_balanced_partitions: {len(groups)} uid groups cannot fill {k_partitions} partitions; "
        "use fewer ranks or more prompts per batch"
    )
    group_lengths = [sum(int(seqlen_list[i]) for i in group) for group in groups]
    group_sets = get_seqlen_balanced_partitions(group_lengths, k_partitions, equal_size=True)
    return [sorted(i for g in group_set for i in groups[g]) for group_set in group_sets]
