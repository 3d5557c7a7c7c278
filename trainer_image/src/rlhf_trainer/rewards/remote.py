"""A remote reward service: POST `{"query", "prompts", "labels"}` -> `{"rewards": [...]}`.

Connection failures, timeouts, HTTP 5xx and 429 are retried with exponential backoff (up to
`retries` more attempts); other HTTP errors and malformed replies fail at once. Every error
names the URL and the last failure. The standard library's HTTP client keeps this dependency
free; one request per batch.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from rlhf_trainer.config import RemoteReward
from rlhf_trainer.config.models import REMOTE_REWARD_TOKEN_ENV

from .output import RewardOutputError, RewardResult, parse_reward_output

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


class RemoteRewardError(RuntimeError):
    """The reward service could not be reached or answered badly; names the URL."""


class RemoteRewardClient:
    def __init__(
        self,
        url: str,
        *,
        timeout_seconds: float = 30.0,
        retries: int = 3,
        backoff_seconds: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
        token: str | None = None,
        max_response_bytes: int = 16 * 1024 * 1024,
    ) -> None:
        self.url = url
        self.token = token
        self.max_response_bytes = max_response_bytes
        self.timeout = timeout_seconds
        self.retries = retries
        self.backoff = backoff_seconds
        self._sleep = sleep
        self.name = f"remote reward {url}"

    @classmethod
    def from_config(cls, cfg: RemoteReward) -> RemoteRewardClient:
        token = os.environ.get(REMOTE_REWARD_TOKEN_ENV) or None
        if cfg.auth_secret is not None and token is None:
            raise RemoteRewardError(
                f"models.remoteReward.authSecret is set but {REMOTE_REWARD_TOKEN_ENV} is empty: "
                "on a cluster the operator fills it from the Secret; locally export it"
            )
        return cls(
            cfg.url,
            timeout_seconds=cfg.timeout_seconds,
            retries=cfg.retries,
            token=token,
            max_response_bytes=cfg.max_response_bytes,
        )

    def __call__(
        self, queries: Sequence[str], prompts: Sequence[str], labels: Sequence[str | None]
    ) -> RewardResult:
        body = json.dumps(
            {"query": list(queries), "prompts": list(prompts), "labels": list(labels)}
        ).encode()
        attempts = self.retries + 1
        last = "no attempt made"
        for attempt in range(attempts):
            if attempt:
                self._sleep(self.backoff * 2 ** (attempt - 1))
            try:
                reply = self._post(body)
            except _Retryable as err:
                last = str(err)
                continue
            try:
                return parse_reward_output(reply, len(queries), self.name)
            except RewardOutputError as err:
                raise RemoteRewardError(str(err)) from err
        raise RemoteRewardError(
            f"{self.name}: no valid answer after {attempts} attempt(s) "
            f"(remoteReward.retries = {self.retries}); last failure: {last}"
        )

    def _post(self, body: bytes) -> Any:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.url, data=body, method="POST", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                # Read one byte past the cap: a larger reply is refused, never held whole.
                payload = response.read(self.max_response_bytes + 1)
        except urllib.error.HTTPError as err:
            detail = err.read()[:500].decode("utf-8", "replace")
            message = f"HTTP {err.code} {err.reason}: {detail}".rstrip(": ")
            if err.code in RETRYABLE_STATUS:
                raise _Retryable(message) from err
            raise RemoteRewardError(f"{self.name}: {message}") from err
        except TimeoutError as err:
            raise _Retryable(f"timed out after {self.timeout:g} s") from err
        except urllib.error.URLError as err:
            if isinstance(err.reason, TimeoutError):
                raise _Retryable(f"timed out after {self.timeout:g} s") from err
            raise _Retryable(f"cannot connect: {err.reason}") from err
        except (ConnectionError, OSError) as err:
            raise _Retryable(f"connection failed: {err}") from err
        if len(payload) > self.max_response_bytes:
            raise RemoteRewardError(
                f"{self.name}: the reply is larger than remoteReward.maxResponseBytes "
                f"({self.max_response_bytes})"
            )
        try:
            reply = json.loads(payload)
        except json.JSONDecodeError as err:
            raise RemoteRewardError(
                f"{self.name}: the reply is not JSON ({err.msg}): {payload[:200]!r}"
            ) from err
        if not isinstance(reply, dict) or "rewards" not in reply:
            raise RemoteRewardError(
                f"{self.name}: the reply must be a JSON object with 'rewards' (one number per "
                f"query); got {str(reply)[:200]}"
            )
        return reply

    def close(self) -> None:
        """Nothing to release (one connection per request)."""


class _Retryable(Exception):
    pass
