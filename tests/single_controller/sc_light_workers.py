"""Worker classes that do not import torch, for tests that only need a process to start, fail or die."""

from __future__ import annotations

import os
import signal
import time

from verl.single_controller.base import Dispatch, Worker, register


class BrokenInitWorker(Worker):
    def __init__(self) -> None:
        super().__init__()
        if self.rank == 1:
            raise KeyError("missing config key on rank 1")


class FragileWorker(Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def die_on(self, bad_rank: int, others_sleep_s: float):
        if self.rank == bad_rank:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(others_sleep_s)  # like a peer blocked in a collective waiting for the dead rank
        return "ok"

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def threads_env(self) -> dict:
        import torch  # imported after the Worker set OMP_NUM_THREADS, as user code usually does

        return {"omp": os.environ["OMP_NUM_THREADS"], "torch": torch.get_num_threads()}
