"""An actor worker that injects one fault, chosen by VERL_TEST_FAULT in the environment the Ray workers inherit:
  hang_update:N   the N-th update_actor call sleeps for an hour on every rank (a hung worker)
  kill_update:N   the N-th update_actor call SIGKILLs rank 1 (a worker process killed mid-step)
  nan_grads:1     every actor gradient is NaN while the loss stays finite (a non-finite grad norm each step)
VERL_TEST_FAULT_MARK names a file the fault appends its start time to (the test's clock for "surfaces after").
"""

from __future__ import annotations

import math
import os
import signal
import time

from verl.single_controller.base import Dispatch, register
from verl.workers.fsdp_workers import ActorRolloutRefWorker

FAULT_ENV = "VERL_TEST_FAULT"


def _poison_backward(module, args, output):
    if output.requires_grad:
        output.register_hook(lambda grad: grad * math.nan)


class FaultyActorWorker(ActorRolloutRefWorker):
    _update_calls_seen = 0

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        super().init_model()
        if os.environ.get(FAULT_ENV, "").startswith("nan_grads") and getattr(self, "actor_module", None) is not None:
            # NaN into the backward at the embeddings' output: the loss stays finite, the embedding grads do not
            self.actor_module.get_input_embeddings().register_forward_hook(_poison_backward)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_actor(self, data):
        fault, _, n = os.environ.get(FAULT_ENV, "").partition(":")
        FaultyActorWorker._update_calls_seen += 1
        if n and FaultyActorWorker._update_calls_seen == int(n):
            with open(os.environ["VERL_TEST_FAULT_MARK"], "a") as f:  # when the fault began, for the test's clock
                f.write(f"{time.time()}\n")
            if fault == "hang_update":
                time.sleep(3600)
            if fault == "kill_update" and self.rank == 1:
                os.kill(os.getpid(), signal.SIGKILL)
        return super().update_actor(data)
