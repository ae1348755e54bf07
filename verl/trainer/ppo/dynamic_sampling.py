"""DAPO's dynamic sampling (`algorithm.filter_groups`): a training step keeps only prompts whose responses disagree.

A group (the `rollout.n` responses to one prompt, sharing a `uid`) whose `metric` is the same for every response
has zero advantage under GRPO-style estimators and moves nothing. Each step therefore runs rounds of:
  1. take the next `data.gen_batch_size` prompts from the dataloader (crossing into the next epoch when needed),
  2. generate and score them (the reward runs here, before any filter),
  3. keep the groups whose metric has a nonzero standard deviation (groups of one response are kept, as upstream),
until `data.train_batch_size` prompts are kept; the batch is then cut to exactly train_batch_size * n rows. After
`max_num_gen_batches` rounds without enough (0: no limit) the step stops with an error saying what to change.
Only the kept rows go on to the log-prob, reference and value passes and the update.

Metrics: `train/num_gen_batches` (rounds this step, upstream's name), `train/num_gen_prompts` (prompts generated),
`train/kept_group_ratio` (kept groups / generated groups, before the cut).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto

# the reward stage's output carried on the rows while rounds are collected (rows are filtered and reordered)
SCORES_KEY = "token_level_scores"
EXTRA_KEYS_META = "reward_extra_keys"


class DataStream:
    """The training prompts as one endless stream of dataloader batches: one epoch follows another.

    A step may draw several batches; the StatefulDataLoader's own state (saved with every checkpoint) stays the
    position of the next batch, because the stream only ever holds the dataloader's live iterator."""

    def __init__(self, dataloader: Iterable[dict]) -> None:
        self.dataloader = dataloader
        self._it: Iterator[dict] | None = None

    def __iter__(self) -> DataStream:
        return self

    def __next__(self) -> dict:
        for _ in range(2):  # a resumed loader may sit at the end of its epoch: one empty pass, then a fresh epoch
            if self._it is None:
                self._it = iter(self.dataloader)
            try:
                return next(self._it)
            except StopIteration:
                self._it = None
        raise RuntimeError("the training dataloader yields no batches (is the dataset smaller than one batch?)")


def attach_reward(batch: DataProto, reward_tensor: torch.Tensor, reward_extra: dict[str, Any]) -> None:
    """Store a round's reward on its rows, so filtering, concatenation and balancing keep it aligned."""
    batch.batch[SCORES_KEY] = reward_tensor
    for key, values in reward_extra.items():
        batch.non_tensor_batch[key] = _object_column(values, len(batch), key)
    batch.meta_info[EXTRA_KEYS_META] = list(reward_extra)


def attached_reward(batch: DataProto) -> tuple[torch.Tensor, dict[str, Any]] | None:
    """(reward_tensor, reward_extra) stored by attach_reward, or None when the rows were not scored yet."""
    if EXTRA_KEYS_META not in batch.meta_info or SCORES_KEY not in batch.batch.keys():
        return None
    extra = {key: list(batch.non_tensor_batch[key]) for key in batch.meta_info[EXTRA_KEYS_META]}
    return batch.batch[SCORES_KEY], extra


def _object_column(values: Any, rows: int, key: str) -> np.ndarray:
    column = np.empty(rows, dtype=object)
    values = list(values)
    if len(values) != rows:
        raise ValueError(f"reward extra info {key!r} has {len(values)} values for {rows} responses")
    column[:] = values
    return column


def metric_values(batch: DataProto, metric: str) -> np.ndarray:
    """Per-response values of `metric`: seq_reward sums the token-level scores, seq_final_reward the token-level
    rewards (the scores less any in-reward KL penalty); acc and score come from the reward manager's extra info."""
    if metric == "seq_reward":
        return batch.batch[SCORES_KEY].sum(dim=-1).float().cpu().numpy()
    if metric == "seq_final_reward":
        # filtering runs before any KL penalty (the config refuses use_kl_in_reward with this metric), so the
        # final reward is the score
        rewards = batch.batch["token_level_rewards"] if "token_level_rewards" in batch.batch.keys() else batch.batch[SCORES_KEY]
        return rewards.sum(dim=-1).float().cpu().numpy()
    if metric not in batch.non_tensor_batch:
        extra = batch.meta_info.get(EXTRA_KEYS_META, [])
        raise KeyError(
            f"algorithm.filter_groups.metric={metric}: the reward manager reports no {metric!r} per response "
            f"(its extra info has {sorted(extra)}). Use metric=seq_reward (the summed score), or "
            "reward_model.reward_manager=dapo (it reports acc), or return a dict with 'score' and "
            f"'{metric}' from your compute_score.")
    try:
        return np.asarray(batch.non_tensor_batch[metric], dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"algorithm.filter_groups.metric={metric}: its values are not numbers ({err})") from err


def kept_rows(uids: np.ndarray, values: np.ndarray) -> tuple[list[int], int, int]:
    """(row indices of the kept groups in row order, groups kept, groups seen). A group is kept when its values
    are not all equal (std > 0), or when it has a single response (nothing to compare, as upstream)."""
    by_uid: dict[Any, list[int]] = {}
    for row, uid in enumerate(uids):
        by_uid.setdefault(uid, []).append(row)
    kept = {uid for uid, rows in by_uid.items() if len(rows) == 1 or np.std(values[rows]) > 0}
    return [row for row, uid in enumerate(uids) if uid in kept], len(kept), len(by_uid)


class DynamicSampler:
    """Collects one step's batch from as many generation rounds as it takes (see the module docstring)."""

    def __init__(self, metric: str, max_num_gen_batches: int, train_batch_size: int, n: int) -> None:
        self.metric = metric
        self.max_num_gen_batches = max_num_gen_batches
        self.train_batch_size = train_batch_size
        self.n = n

    def collect(self, first: dict, stream: Iterator[dict], generate_and_score: Callable[[dict], DataProto],
                metrics: dict[str, float]) -> DataProto:
        """`generate_and_score(batch_dict)` returns the round's responses with attach_reward already applied."""
        parts: list[DataProto] = []
        kept_prompts = groups_kept = groups_seen = rounds = 0
        batch_dict = first
        while True:
            rounds += 1
            scored = generate_and_score(batch_dict)
            rows, kept, seen = kept_rows(scored.non_tensor_batch["uid"], metric_values(scored, self.metric))
            groups_kept, groups_seen, kept_prompts = groups_kept + kept, groups_seen + seen, kept_prompts + kept
            if rows:
                parts.append(scored.select_idxs(rows))
            if kept_prompts >= self.train_batch_size:
                break
            if 0 < self.max_num_gen_batches <= rounds:
                raise RuntimeError(self._too_many_rounds(rounds, kept_prompts, groups_seen))
            batch_dict = next(stream)
        metrics["train/num_gen_batches"] = rounds
        metrics["train/num_gen_prompts"] = groups_seen
        metrics["train/kept_group_ratio"] = groups_kept / groups_seen
        # groups are contiguous (responses are interleaved per prompt), so a cut at a multiple of n keeps them whole
        return DataProto.concat(parts).slice(0, self.train_batch_size * self.n)

    def _too_many_rounds(self, rounds: int, kept: int, seen: int) -> str:
        return (
            f"dynamic sampling: after {rounds} generation rounds (algorithm.filter_groups.max_num_gen_batches="
            f"{self.max_num_gen_batches}) only {kept} of the {seen} prompts generated had responses that differ in "
            f"{self.metric}, fewer than data.train_batch_size={self.train_batch_size}. The data may be too hard or "
            "too easy for the model: raise max_num_gen_batches (0 means no limit) or data.gen_batch_size, raise "
            "actor_rollout_ref.rollout.n or the temperature, lower data.train_batch_size, or pick easier/harder "
            "prompts.")
