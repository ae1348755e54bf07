"""Per-sample scores -> the batch's ``reward_tensor`` and ``reward_extra_info``, as the batch managers return them.

Every row must carry the same extra-info keys, except rows whose scoring timed out (``reward_timeout`` true): those
get 0/False for the keys the other rows fill with numbers and None for the rest, exactly as a batch manager fills a
timed-out row (verl.workers.reward_manager.timed_scoring.fill_timed_out_fields).
"""

from __future__ import annotations

from typing import Any

import torch

from verl.workers.reward_manager.scoring import ExtraInfoCollector, place_scores
from verl.workers.reward_manager.timed_scoring import TIMEOUT_FIELD, fill_timed_out_fields

__all__ = ["merge_sample_scores"]


def merge_sample_scores(results: list[dict], lengths: list[int],
                        response_length: int) -> tuple[torch.Tensor, dict[str, list[Any]]]:
    """``results[i]`` is row i's ``{"reward_score", "reward_extra_info"}``; ``lengths[i]`` its real response tokens.
    The score goes on the row's last real token (position 0 for an empty response)."""
    rewards = [float(r["reward_score"]) for r in results]
    fields: list[dict[str, Any] | None] = []
    timed_out: list[bool] = []
    for result in results:
        info = dict(result.get("reward_extra_info") or {})
        flag = info.get(TIMEOUT_FIELD)
        timed_out.append(flag is True)
        # a timed-out row is filled from the others; its own keys (only the flag, from a batch manager) are kept
        fields.append(None if flag is True and set(info) <= {TIMEOUT_FIELD} else info)
    filled = fill_timed_out_fields(fields)
    collector = ExtraInfoCollector()
    for row, flag in zip(filled, timed_out):
        if flag:
            row[TIMEOUT_FIELD] = True
        collector.add(row)
    return place_scores(rewards, lengths, response_length), collector.result(len(results))
