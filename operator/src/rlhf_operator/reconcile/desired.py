"""A child as the reconcile decision wants it, and how it may be applied.

Its own module because both sides of the apply need it: `reconcile` (pure) decides the children,
`kube` (the API client) applies them; the client must not import the decision to know its
type (the dependency runs handlers -> {reconcile, kube} -> builders, never kube -> reconcile).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property

from ..builders.common import JSON
from ..builders.encoding import canonical


@dataclass(frozen=True)
class Desired:
    """A child as it should be. `create_only`: never changed after creation (a PVC's spec is
    immutable; the report's data is the trainer's; a token must not rotate under a running
    job). `preserve`: fields another controller owns, left as they are found. `generated`:
    data keys given a fresh random value when the child is created, and never again
    (builders are pure, so a secret value cannot come from them)."""

    obj: JSON
    create_only: bool = False
    preserve: tuple[tuple[str, ...], ...] = ()
    generated: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        return str(self.obj["kind"])

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @cached_property
    def digest(self) -> str:
        """What is applied, to know when a child must be applied again (kept in memory by
        the applier). Computed once per pass: the object is large (a RayJob's pod templates)."""
        return hashlib.sha256(canonical([self.obj, self.preserve])).hexdigest()
