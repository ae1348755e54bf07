"""Worker classes without torch for the deadline tests: a rank that hangs in a call or in its __init__."""

from __future__ import annotations

import time

from verl.single_controller.base import Dispatch, Worker, register


class HangingWorker(Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def hang_on(self, bad_rank: int, hang_s: float, others_s: float = 0.0) -> str:
        time.sleep(hang_s if self.rank == bad_rank else others_s)
        return "ok"

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def sleep_per_row(self, data):
        time.sleep(data.meta_info["seconds_per_row"] * len(data))
        return data

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self, sleep_s: float = 0.0) -> None:
        time.sleep(sleep_s)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def ping(self) -> int:
        return self.rank


class SlowInitWorker(Worker):
    def __init__(self, init_s: float) -> None:
        super().__init__()
        time.sleep(init_s)
