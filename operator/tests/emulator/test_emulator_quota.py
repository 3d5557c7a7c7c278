"""ResourceQuota object counts (quota.py): the create that would pass the limit is a 403."""

from __future__ import annotations

import pytest

from emulator import Emulator
from emulator.errors import ApiError


async def test_count_quota_refuses_the_object_over_the_limit(emulator: Emulator) -> None:
    emulator.create(
        "resourcequotas",
        {"metadata": {"name": "small"}, "spec": {"hard": {"count/configmaps": "1"}}},
        "default",
    )
    emulator.create("configmaps", {"metadata": {"name": "one"}}, "default")
    with pytest.raises(ApiError) as caught:
        emulator.create("configmaps", {"metadata": {"name": "two"}}, "default")
    assert caught.value.code == 403
    assert caught.value.message == (
        'configmaps "two" is forbidden: exceeded quota: small, requested: count/configmaps=1, '
        "used: count/configmaps=1, limited: count/configmaps=1"
    )
    emulator.create_namespace("other")  # quotas are per namespace
    emulator.create("configmaps", {"metadata": {"name": "two"}}, "other")
