"""Engine loops for engines spread over several ranks, which must step together.

- ``LockstepEngineLoop`` (HF generate under FSDP): every rank runs its own trajectories, but a sharded forward
  all-gathers the weights, so all ranks call ``step`` the same number of times. Each round the ranks agree (one
  small all-reduce) whether anyone has work; a rank with none joins with a one-token dummy generation, and HF's
  ``synced_gpus`` keeps the ranks' decode steps in line inside one call. The loop ends when every rank is done.
- ``MirroredEngineLoop`` (a tensor-parallel vLLM engine): one engine spans the group, and every rank of it must
  add the same requests and step together. The group's first rank runs the trajectories; each round it sends the
  requests it added to the others, which add them to their part of the engine and step with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from verl.workers.rollout.agent_loop.server import EngineLoop, EngineRequest

__all__ = ["EngineGroup", "LockstepEngineLoop", "MirroredEngineLoop"]

_IDLE_POLL_S = 0.005


@dataclass
class EngineGroup:
    """The ranks one rollout engine needs in step: ``kind`` "lockstep" (FSDP-sharded HF) or "mirror" (vLLM TP)."""

    kind: str
    group: Any  # a torch.distributed (gloo) process group
    rank_in_group: int
    size: int
    leader: int  # the global rank of the group's first member

    @property
    def is_leader(self) -> bool:
        return self.rank_in_group == 0


class LockstepEngineLoop(EngineLoop):
    def __init__(self, backend: Any, group: EngineGroup, **kwargs: Any) -> None:
        super().__init__(backend, **kwargs)
        self.engine_group = group
        # nccl reduces device tensors only
        self._flag_device = "cuda" if dist.get_backend(group.group) == "nccl" else "cpu"

    def serve(self, done: Callable[[], bool]) -> None:
        try:
            while True:
                self._abort_if_enough()  # this rank's own trajectories: the rounds go on while any rank has work
                self._collect(block=False)
                finished = done() and self._queue.empty() and not self.backend.has_work()
                flags = torch.tensor([int(self.backend.has_work()), int(finished)], dtype=torch.long,
                                     device=self._flag_device)
                dist.all_reduce(flags, group=self.engine_group.group)
                if flags[0] > 0:
                    self._step()  # the backend runs a dummy generation when this rank has nothing queued
                elif flags[1] == self.engine_group.size:
                    return
                else:
                    time.sleep(_IDLE_POLL_S)
        except BaseException as err:
            self.backend.fail_all(err)
            self._fail_queued(err)
            raise


class MirroredEngineLoop(EngineLoop):
    """On the group's leader: serve as usual, sending each round's new requests and decision to the followers.
    On a follower: ``follow()`` instead, until the leader says it is finished."""

    def __init__(self, backend: Any, group: EngineGroup, **kwargs: Any) -> None:
        super().__init__(backend, **kwargs)
        self.engine_group = group
        self._added: list[EngineRequest] = []
        add = backend.add

        def recording_add(request: EngineRequest) -> None:
            add(request)
            self._added.append(request)

        backend.add = recording_add

    def _send(self, has_work: bool, finished: bool) -> None:
        message = [([(r.request_id, r.prompt_ids, r.sampling_params) for r in self._added], has_work, finished)]
        self._added = []
        dist.broadcast_object_list(message, src=self.engine_group.leader, group=self.engine_group.group)

    def serve(self, done: Callable[[], bool]) -> None:
        try:
            while True:
                self._collect(block=not self.backend.has_work())
                has_work = self.backend.has_work()
                finished = not has_work and done() and self._queue.empty()
                self._send(has_work, finished)
                if has_work:
                    self._step()
                elif finished:
                    return
        except BaseException as err:
            self.backend.fail_all(err)
            self._fail_queued(err)
            try:  # release the followers from their loop; the manager then sends them the error
                self._added = []
                self._send(False, True)
            except Exception:  # noqa: BLE001 - the group itself may be what failed
                pass
            raise

    def follow(self) -> None:
        while True:
            message = [None]
            dist.broadcast_object_list(message, src=self.engine_group.leader, group=self.engine_group.group)
            requests, has_work, finished = message[0]
            for request_id, prompt_ids, params in requests:
                self.backend.add(EngineRequest(request_id, prompt_ids, params))
            if has_work:
                self.backend.step()
            elif finished:
                return
