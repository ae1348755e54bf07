"""Rate limits for remote judges: ``AsyncTokenBucket`` (requests or tokens per second) and ``RateLimits``, the three
layers upstream's rate-limited reward manager applies (concurrency, requests per minute, tokens per minute).

The asyncio objects are made on first use inside the running event loop (a semaphore or lock made elsewhere is bound
to no loop, or the wrong one), and are never pickled: a copy starts with fresh limiters."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["AsyncTokenBucket", "RateLimits"]


class AsyncTokenBucket:
    """A token bucket for coroutines: ``await bucket.acquire(n)`` returns once ``n`` tokens could be taken.

    The bucket starts full with ``max_tokens`` (default ``rate_limit``) and refills at ``rate_limit`` tokens per
    second, never above ``max_tokens``. A request larger than the bucket is let through after the time it takes to
    earn its shortfall, leaving the balance negative, so later requests wait for the debt too. Waiting happens
    outside the lock; time is the running event loop's clock.
    """

    def __init__(self, rate_limit: float, max_tokens: float | None = None) -> None:
        if not rate_limit > 0:
            raise ValueError(f"AsyncTokenBucket needs rate_limit > 0 tokens per second, got {rate_limit}")
        self.rate_limit = float(rate_limit)
        self.max_tokens = float(max_tokens or rate_limit)
        self.tokens = self.max_tokens
        self.last_update: float | None = None
        self.lock = asyncio.Lock()

    def _refill(self) -> None:
        now = asyncio.get_running_loop().time()
        if self.last_update is not None:
            self.tokens = min(self.max_tokens, self.tokens + (now - self.last_update) * self.rate_limit)
        self.last_update = now

    async def acquire(self, num_tokens: float = 1.0) -> None:
        if num_tokens > self.max_tokens:  # can never be held at once: pay the shortfall in time, go into debt
            async with self.lock:
                self._refill()
                wait = max(0.0, num_tokens - self.tokens) / self.rate_limit
                self.tokens -= num_tokens
            if wait > 0:
                await asyncio.sleep(wait)
            return
        while True:
            async with self.lock:
                self._refill()
                if self.tokens >= num_tokens:
                    self.tokens -= num_tokens
                    return
                wait = (num_tokens - self.tokens) / self.rate_limit
            await asyncio.sleep(wait)


class RateLimits:
    """``async with limits.slot():`` waits for a request-per-minute token, ``estimated_tokens_per_request``
    tokens-per-minute tokens, then one of ``max_concurrent`` slots. None (or 0) leaves that layer off."""

    def __init__(self, max_concurrent: int | None = None, max_rpm: float | None = None, max_tpm: float | None = None,
                 estimated_tokens_per_request: float = 2000) -> None:
        for name, value in (("max_concurrent", max_concurrent), ("max_rpm", max_rpm), ("max_tpm", max_tpm)):
            if value is not None and value < 0:
                raise ValueError(f"reward_model.{name} must be >= 1 or null (no limit), got {value}")
        if not estimated_tokens_per_request > 0:
            raise ValueError("reward_model.estimated_tokens_per_request must be > 0, got "
                             f"{estimated_tokens_per_request}")
        self.max_concurrent = max_concurrent or None
        self.max_rpm = max_rpm or None
        self.max_tpm = max_tpm or None
        self.estimated_tokens_per_request = float(estimated_tokens_per_request)
        self._made: dict[str, Any] | None = None
        self._made_in: Any = None  # the event loop they belong to: a new loop (a new asyncio.run) gets new ones

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_made": None, "_made_in": None}

    def _limiters(self) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        if self._made is None or self._made_in is not loop:
            self._made_in = loop
            self._made = {
                "semaphore": asyncio.Semaphore(self.max_concurrent) if self.max_concurrent else None,
                "rpm": AsyncTokenBucket(self.max_rpm / 60.0) if self.max_rpm else None,
                "tpm": AsyncTokenBucket(self.max_tpm / 60.0) if self.max_tpm else None,
            }
        return self._made

    def slot(self) -> _Slot:
        return _Slot(self._limiters(), self.estimated_tokens_per_request)


class _Slot:
    def __init__(self, limiters: dict[str, Any], tokens: float) -> None:
        self.limiters = limiters
        self.tokens = tokens

    async def __aenter__(self) -> None:
        if self.limiters["rpm"] is not None:
            await self.limiters["rpm"].acquire(1.0)
        if self.limiters["tpm"] is not None:
            await self.limiters["tpm"].acquire(self.tokens)
        if self.limiters["semaphore"] is not None:
            await self.limiters["semaphore"].acquire()

    async def __aexit__(self, *exc: Any) -> None:
        if self.limiters["semaphore"] is not None:
            self.limiters["semaphore"].release()
