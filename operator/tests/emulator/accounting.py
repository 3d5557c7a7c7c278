"""Request accounting and fault injection for the emulated API server."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from . import errors


@dataclass(frozen=True)
class RequestRecord:
    """One served request: `verb` is Kubernetes' (get, list, watch, create, update, patch, ...)."""

    verb: str
    resource: str  # `configmaps`, `rayjobs.ray.io`, `rlhfjobs.rlhf.dev/status`, or `discovery`
    namespace: str | None
    name: str | None
    path: str
    code: int
    at: float  # time.monotonic()


@dataclass
class RequestLog:
    records: list[RequestRecord] = field(default_factory=list)

    def add(self, record: RequestRecord) -> None:
        self.records.append(record)

    def mark(self) -> int:
        """A position to count from later: `log.counts(since=log.mark())`."""
        return len(self.records)

    def counts(self, since: int = 0) -> Counter[tuple[str, str]]:
        """Requests per (verb, resource) since a mark."""
        return Counter((r.verb, r.resource) for r in self.records[since:])

    def count(
        self,
        verb: str | None = None,
        resource: str | None = None,
        *,
        namespace: str | None = None,
        name: str | None = None,
        since: int = 0,
    ) -> int:
        return sum(
            1
            for r in self.records[since:]
            if (verb is None or r.verb == verb)
            and (resource is None or r.resource == resource)
            and (namespace is None or r.namespace == namespace)
            and (name is None or r.name == name)
        )


@dataclass
class Fault:
    verb: str | None
    resource: str | None
    name: str | None
    code: int
    reason: str
    message: str
    remaining: int | None  # None: forever


@dataclass
class Faults:
    """Make chosen requests fail, e.g. `faults.add("patch", "rayjobs.ray.io", code=500)`."""

    rules: list[Fault] = field(default_factory=list)

    def add(
        self,
        verb: str | None,
        resource: str | None,
        *,
        name: str | None = None,
        code: int = 500,
        reason: str = "InternalError",
        message: str = "injected failure",
        times: int | None = 1,
    ) -> Fault:
        rule = Fault(verb, resource, name, code, reason, message, times)
        self.rules.append(rule)
        return rule

    def clear(self) -> None:
        self.rules.clear()

    def check(self, verb: str, resource: str, name: str | None) -> None:
        for rule in self.rules:
            if (
                (rule.verb is None or rule.verb == verb)
                and (rule.resource is None or rule.resource == resource)
                and (rule.name is None or rule.name == name)
                and (rule.remaining is None or rule.remaining > 0)
            ):
                if rule.remaining is not None:
                    rule.remaining -= 1
                raise errors.ApiError(rule.code, rule.reason, rule.message)


def now() -> float:
    return time.monotonic()
