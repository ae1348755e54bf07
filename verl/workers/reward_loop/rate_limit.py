"""``AsyncTokenBucket``: the rate limiter upstream's rate-limited reward manager uses for API judges (requests or
tokens per second), self-contained so a reward loop built later can use it as is."""

from __future__ import annotations

import asyncio

__all__ = ["AsyncTokenBucket"]


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
