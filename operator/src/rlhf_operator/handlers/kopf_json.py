"""kopf's watch streams decoded by orjson.

kopf reads each line of a watch stream with the standard library's `json.loads`
(`kopf._cogs.clients.api.stream`): every event of every watched object, ~3 % of the operator's
CPU in a burst of new jobs (`bench/operator_scale.py --sample`), where orjson takes a fifth of
that. The module's `json` is replaced by one whose `loads` is `builders.encoding.decode`
(orjson, the standard library for what orjson refuses) and whose other names are the
standard library's. kopf is pinned; a kopf that no longer reads its streams there is left as
it is (a test fails on such an upgrade, and the operator logs it).
"""

from __future__ import annotations

import json
import logging
import types
from typing import Any

from ..builders.encoding import decode

logger = logging.getLogger(__name__)


class _FastLoads(types.ModuleType):
    """The standard library's json, with orjson's loads."""

    def __init__(self) -> None:
        super().__init__("json")
        self.loads = decode

    def __getattr__(self, name: str) -> Any:
        return getattr(json, name)


def decode_watch_streams_with_orjson() -> bool:
    """Installs the faster `loads` in kopf's client (idempotent); False where kopf's code does
    not look as expected."""
    try:
        from kopf._cogs.clients import api as kopf_api
    except ImportError:
        kopf_api = None  # type: ignore[assignment]
    current = getattr(kopf_api, "json", None)
    if isinstance(current, _FastLoads):
        return True
    if current is not json:
        logger.warning("kopf's client no longer decodes with json: its watches keep its own")
        return False
    kopf_api.json = _FastLoads()  # type: ignore[attr-defined]
    return True
