"""A checker of the Pod Security Standards' "restricted" profile (which includes "baseline"),
field by field as https://kubernetes.io/docs/concepts/security/pod-security-standards/ states
it (Kubernetes 1.30+), for pod specs the operator renders. No cluster needed: the Pod Security
admission controller applies the same rules when a namespace enforces `restricted`.

`violations(pod_spec, annotations)` returns one line per broken rule, naming the field.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

# Baseline: sysctls any pod may set.
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
# Restricted: the only volume sources allowed.
VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
SECCOMP_ALLOWED = {"RuntimeDefault", "Localhost"}
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")

JSON = Mapping[str, Any]


def _containers(pod: JSON) -> Iterator[tuple[str, JSON]]:
    for field in CONTAINER_LISTS:
        for i, container in enumerate(pod.get(field) or []):
            yield f"spec.{field}[{i}]", container


def _baseline(pod: JSON, annotations: JSON) -> Iterator[str]:
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            yield f"spec.{field}: must be unset or false"
    pod_ctx = pod.get("securityContext") or {}
    if (pod_ctx.get("windowsOptions") or {}).get("hostProcess"):
        yield "spec.securityContext.windowsOptions.hostProcess: must be unset or false"
    for i, volume in enumerate(pod.get("volumes") or []):
        if "hostPath" in volume:
            yield f"spec.volumes[{i}].hostPath: hostPath volumes are forbidden"
    for i, sysctl in enumerate(pod_ctx.get("sysctls") or []):
        if sysctl.get("name") not in SAFE_SYSCTLS:
            yield f"spec.securityContext.sysctls[{i}]: {sysctl.get('name')} is not a safe sysctl"
    if (pod_ctx.get("seccompProfile") or {}).get("type") == "Unconfined":
        yield "spec.securityContext.seccompProfile.type: must not be Unconfined"
    yield from _selinux("spec.securityContext", pod_ctx)
    if (pod_ctx.get("appArmorProfile") or {}).get("type") == "Unconfined":
        yield "spec.securityContext.appArmorProfile.type: must not be Unconfined"
    for key, value in annotations.items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and (
            value not in {"runtime/default"} and not str(value).startswith("localhost/")
        ):
            yield f"metadata.annotations[{key}]: AppArmor must be runtime/default or localhost/*"
    for where, container in _containers(pod):
        ctx = container.get("securityContext") or {}
        if ctx.get("privileged"):
            yield f"{where}.securityContext.privileged: must be unset or false"
        if (ctx.get("windowsOptions") or {}).get("hostProcess"):
            yield f"{where}.securityContext.windowsOptions.hostProcess: must be unset or false"
        for j, port in enumerate(container.get("ports") or []):
            if port.get("hostPort"):
                yield f"{where}.ports[{j}].hostPort: host ports are forbidden"
        if ctx.get("procMount", "Default") != "Default":
            yield f"{where}.securityContext.procMount: must be Default"
        if (ctx.get("seccompProfile") or {}).get("type") == "Unconfined":
            yield f"{where}.securityContext.seccompProfile.type: must not be Unconfined"
        if (ctx.get("appArmorProfile") or {}).get("type") == "Unconfined":
            yield f"{where}.securityContext.appArmorProfile.type: must not be Unconfined"
        yield from _selinux(f"{where}.securityContext", ctx)


def _selinux(where: str, ctx: JSON) -> Iterator[str]:
    options = ctx.get("seLinuxOptions") or {}
    if options.get("type", "") not in SELINUX_TYPES:
        yield f"{where}.seLinuxOptions.type: {options.get('type')} is not allowed"
    for field in ("user", "role"):
        if options.get(field):
            yield f"{where}.seLinuxOptions.{field}: must be unset"


def _restricted(pod: JSON) -> Iterator[str]:
    pod_ctx = pod.get("securityContext") or {}
    for i, volume in enumerate(pod.get("volumes") or []):
        kinds = set(volume) - {"name"}
        if not kinds <= VOLUME_TYPES:
            yield f"spec.volumes[{i}]: {', '.join(sorted(kinds - VOLUME_TYPES))} not allowed"
    if pod_ctx.get("runAsUser") == 0:
        yield "spec.securityContext.runAsUser: must not be 0"
    pod_non_root = pod_ctx.get("runAsNonRoot") is True
    pod_seccomp = (pod_ctx.get("seccompProfile") or {}).get("type") in SECCOMP_ALLOWED
    for where, container in _containers(pod):
        ctx = container.get("securityContext") or {}
        if ctx.get("allowPrivilegeEscalation") is not False:
            yield f"{where}.securityContext.allowPrivilegeEscalation: must be false"
        non_root = ctx.get("runAsNonRoot", pod_non_root)
        if non_root is not True:
            yield f"{where}.securityContext.runAsNonRoot: must be true (here or on the pod)"
        if ctx.get("runAsUser") == 0:
            yield f"{where}.securityContext.runAsUser: must not be 0"
        seccomp = (ctx.get("seccompProfile") or {}).get("type")
        if not (seccomp in SECCOMP_ALLOWED or (seccomp is None and pod_seccomp)):
            yield f"{where}.securityContext.seccompProfile.type: RuntimeDefault or Localhost"
        capabilities = ctx.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            yield f"{where}.securityContext.capabilities.drop: must include ALL"
        added = set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}
        if added:
            yield f"{where}.securityContext.capabilities.add: {sorted(added)} not allowed"


def violations(pod: JSON, annotations: JSON | None = None) -> list[str]:
    """Every way `pod` (a PodSpec) breaks the restricted profile; empty when it complies."""
    return [*_baseline(pod, annotations or {}), *_restricted(pod)]
