"""Client-side rate limit of the operator's own requests (not kopf's watches): a token bucket,
as client-go's `QPS` and `Burst` (requests per second on average, and how many may go at once
after a quiet spell). Off by default: the API server's priority and fairness is the guard a
cluster has anyway; a platform that wants the operator to stay below a share of it sets
RLHF_OPERATOR_CLIENT_QPS / _BURST (docs/scale.md)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class TokenBucket:
    def __init__(
        self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"a rate limit needs qps > 0 and burst >= 1 (got {qps}, {burst})")
        self.qps, self.burst, self._clock = qps, burst, clock
        self._tokens = float(burst)
        self._updated = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._updated) * self.qps)
        self._updated = now

    def wait_seconds(self) -> float:
        """Take a token if one is there (0.0), else how long until one will be."""
        self._refill()
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self.qps

    async def acquire(self) -> None:
        while (delay := self.wait_seconds()) > 0:
            await asyncio.sleep(delay)
