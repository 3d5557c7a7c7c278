"""The platform's policy, checked against a job's spec (pure).

The CRD and `rlhf validate` already refuse values that are malformed (names/patterns.py);
this is the other half: values that are well-formed but that this cluster's platform team does
not allow (an image from an unknown registry, a priority class above the job's station, a
node pool of another team). Each problem names the field, the value and what is allowed, and
makes the job Valid=False with reason PolicyViolation.
"""

from __future__ import annotations

from rlhf_trainer.config import EgressPolicy, JobSpec

from ..settings import ENV_PREFIX, OperatorSettings, PlatformPolicy


def image_allowed(image: str, prefix: str) -> bool:
    """`prefix` admits `image` at a path boundary: `ghcr.io/org` admits `ghcr.io/org/x:1` and
    `ghcr.io/org:1`, never `ghcr.io/org-evil/x`. A prefix ending in `/`, `:` or `@` is taken
    as written."""
    if prefix.endswith(("/", ":", "@")):
        return image.startswith(prefix)
    return image == prefix or any(image.startswith(prefix + sep) for sep in "/:@")


def _listed(values: tuple[str, ...]) -> str:
    return ", ".join(values)


def policy_problems(spec: JobSpec, settings: OperatorSettings) -> list[str]:
    """Every way `spec` breaks the platform policy (empty: it complies)."""
    policy: PlatformPolicy = settings.policy
    problems: list[str] = []
    p = spec.placement
    allowed = policy.allowed_image_prefixes
    image = spec.image
    if image is not None and allowed and not any(image_allowed(image, a) for a in allowed):
        problems.append(
            f"spec.image: {spec.image!r} is not allowed by the platform policy "
            f"(images must start with one of: {_listed(allowed)})"
        )
    allowed = policy.allowed_priority_classes
    if p.priority_class_name is not None and allowed and p.priority_class_name not in allowed:
        problems.append(
            f"spec.placement.priorityClassName: {p.priority_class_name!r} is not allowed by the "
            f"platform policy (allowed: {_listed(allowed)})"
        )
    allowed = policy.allowed_scheduler_names
    if p.scheduler_name is not None and allowed and p.scheduler_name not in allowed:
        problems.append(
            f"spec.placement.schedulerName: {p.scheduler_name!r} is not allowed by the platform "
            f"policy (allowed: {_listed(allowed)})"
        )
    fixed = dict(policy.node_selector)
    allowed = policy.allowed_node_selector_keys
    for key, value in p.node_selector.items():
        if key in fixed:
            if value != fixed[key]:
                problems.append(
                    f"spec.placement.nodeSelector.{key}: the platform fixes it to "
                    f"{fixed[key]!r} (got {value!r}); leave it out"
                )
        elif allowed and key not in allowed:
            problems.append(
                f"spec.placement.nodeSelector.{key}: key not allowed by the platform policy "
                f"(allowed keys: {_listed(allowed)})"
            )
    if policy.require_queue_name and p.queue_name is None:
        problems.append(
            "spec.placement.queueName: the platform policy requires every job to name its "
            "Kueue LocalQueue"
        )
    if spec.network.egress is EgressPolicy.RESTRICTED and not settings.api_server_cidrs:
        problems.append(
            "spec.network.egress: restricted needs the operator to know the Kubernetes API's "
            f"addresses (the trainer reports through it): ask the platform team to set "
            f"{ENV_PREFIX}API_SERVER_CIDRS (Helm value network.apiServerCidrs)"
        )
    return problems
