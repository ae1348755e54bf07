"""Stopping a role whose gradient norm stays non-finite.

One NaN/inf grad norm skips that optimizer step (verl.workers.micro_batching.clipped_optimizer_step) and training goes
on: a single bad batch is survivable. A streak of them means the weights or the data are broken, and skipping forever
would burn the run's budget without learning; after ``limit`` consecutive skips the update raises
NonFiniteGradError. The norm is the global one (reduced over the ranks), so every rank raises at the same step and
none is left waiting in a collective. The streak is part of the role's step state, so it survives a resume.
"""

from __future__ import annotations

import math


class NonFiniteGradError(FloatingPointError):
    """Too many consecutive optimizer steps of a role were skipped for a non-finite gradient norm."""


class NonFiniteGradStreak:
    """Counts consecutive skipped optimizer steps of one role; ``limit`` None or 0: never stop."""

    def __init__(self, role: str, limit: int | None, key: str) -> None:
        self.role = role
        self.limit = limit
        self.key = key  # the config key of `limit`, for the message
        self.count = 0

    def record(self, grad_norm: float, where: str) -> None:
        """After each optimizer step (taken or skipped); raises on the ``limit``-th skip in a row."""
        if math.isfinite(grad_norm):
            self.count = 0
            return
        self.count += 1
        if self.limit and self.count >= self.limit:
            raise NonFiniteGradError(
                f"{self.role} grad norm was {grad_norm} for {self.count} consecutive optimizer steps (the last at "
                f"{where}); each was skipped, the weights are those of the last finite step. Stopping the run: "
                f"{self.key}={self.limit}. Lower the learning rate, check the rewards/advantages for extreme values, "
                f"or set {self.key}=0 to keep skipping")
