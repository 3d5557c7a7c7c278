"""ResourceQuota object counts, as the real server's quota admission enforces them.

Only `count/<resource>` limits (`count/rlhfjobs.rlhf.dev: 10`, `count/configmaps: 5`) are
enforced, at create time, counting the objects stored in the namespace; compute resources
(`requests.nvidia.com/gpu`) belong to pods, which the emulator does not schedule, and are not
checked. `status.used` is not maintained.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from . import errors
from .resources import ResourceInfo

JSON = dict[str, Any]


def _key(info: ResourceInfo) -> str:
    return f"count/{info.qualified}"


def check(info: ResourceInfo, name: str, quotas: Iterable[JSON], count: Callable[[], int]) -> None:
    """403 `exceeded quota` when one more object of `info` would pass a quota's hard limit."""
    for quota in quotas:
        hard = (quota.get("spec") or {}).get("hard") or {}
        limit = hard.get(_key(info))
        if limit is None and not info.group:
            limit = hard.get(info.plural)  # core kinds may also be limited by plain name
        if limit is None:
            continue
        used = count()
        if used + 1 > int(limit):
            key = _key(info)
            raise errors.forbidden(
                f'{info.qualified} "{name}" is forbidden: exceeded quota: '
                f"{quota['metadata']['name']}, requested: {key}=1, used: {key}={used}, "
                f"limited: {key}={limit}"
            )
