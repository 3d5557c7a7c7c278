"""What a kubelet derives from a pod spec before it starts a container (pure): the container's
environment (values, Secret/ConfigMap keys, the downward API), its command line (Kubernetes'
rules for command/args over the image's ENTRYPOINT/CMD, with `$(VAR)` expansion), the files of
its ConfigMap/Secret volumes, and the errors a kubelet reports when a referenced object is
missing (the same reasons and messages).
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

JSON = dict[str, Any]
# (plural, namespace, name) -> the stored object or None.
Lookup = Callable[[str, str, str], JSON | None]

_UNITS = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_FIELD = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")


class ConfigError(Exception):
    """The kubelet cannot start the container: `reason` as it reports it on the pod."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def quantity(text: str | int | float) -> Decimal:
    """A Kubernetes quantity (`500m`, `2Gi`, `1e3`) as a number."""
    match = _QUANTITY.match(str(text).strip())
    if match is None or match.group(2) not in _UNITS:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return Decimal(match.group(1)) * _UNITS[match.group(2)]


def quantity_value(text: str | int | float) -> int:
    """Quantity.Value(): rounded up to an integer, as KubeRay reads CPUs and memory."""
    return math.ceil(quantity(text))


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: defined variables are replaced, others kept, `$$` is `$`."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _REF.sub(replace, text)


def _decoded(obj: JSON, plural: str) -> dict[str, bytes]:
    if plural == "secrets":
        return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    data = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return data


def _kind(plural: str) -> tuple[str, str]:
    return ("secret", "Secret") if plural == "secrets" else ("configmap", "ConfigMap")


def key_of(lookup: Lookup, plural: str, namespace: str, ref: Mapping[str, Any]) -> str | None:
    """The value of `ref` (secretKeyRef / configMapKeyRef); None when optional and absent."""
    lower, kind = _kind(plural)
    obj = lookup(plural, namespace, str(ref.get("name", "")))
    optional = bool(ref.get("optional", False))
    if obj is None:
        if optional:
            return None
        raise ConfigError("CreateContainerConfigError", f'{lower} "{ref.get("name")}" not found')
    data = _decoded(obj, plural)
    if ref.get("key") not in data:
        if optional:
            return None
        raise ConfigError(
            "CreateContainerConfigError",
            f"couldn't find key {ref.get('key')} in {kind} {namespace}/{ref.get('name')}",
        )
    return data[str(ref["key"])].decode()


def field_value(pod: JSON, path: str) -> str:
    """The downward API's fieldRef values."""
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": status.get("hostIP"),
        "status.podIP": status.get("podIP"),
        "status.podIPs": ",".join(p["ip"] for p in status.get("podIPs") or []),
    }
    if path in simple:
        return str(simple[path] or "")
    match = _FIELD.match(path)
    if match is None:
        raise ConfigError("CreateContainerConfigError", f"unsupported fieldPath: {path}")
    return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))


def resource_value(container: JSON, ref: Mapping[str, Any]) -> str:
    kind, _, name = str(ref.get("resource", "")).partition(".")
    amount = ((container.get("resources") or {}).get(kind) or {}).get(name)
    if amount is None:
        return "0"
    divisor = quantity(ref.get("divisor", "1"))
    return str(math.ceil(quantity(amount) / divisor))


def environment(
    pod: JSON,
    container: JSON,
    lookup: Lookup,
    base: Mapping[str, str],
) -> dict[str, str]:
    """`base` (the image's ENV and the runtime's variables), then envFrom, then env in order,
    each value expanded against what precedes it, as the kubelet builds it."""
    namespace = pod["metadata"]["namespace"]
    env = dict(base)
    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix", ""))
        for plural, key in (("configmaps", "configMapRef"), ("secrets", "secretRef")):
            ref = source.get(key)
            if ref is None:
                continue
            obj = lookup(plural, namespace, str(ref.get("name", "")))
            if obj is None:
                if ref.get("optional"):
                    continue
                lower, _ = _kind(plural)
                raise ConfigError(
                    "CreateContainerConfigError", f'{lower} "{ref.get("name")}" not found'
                )
            env.update({prefix + k: v.decode() for k, v in _decoded(obj, plural).items()})
    for var in container.get("env") or []:
        name, source = str(var["name"]), var.get("valueFrom")
        value: str | None
        if source is None:
            value = expand(str(var.get("value", "")), env)
        elif "secretKeyRef" in source:
            value = key_of(lookup, "secrets", namespace, source["secretKeyRef"])
        elif "configMapKeyRef" in source:
            value = key_of(lookup, "configmaps", namespace, source["configMapKeyRef"])
        elif "fieldRef" in source:
            value = field_value(pod, str(source["fieldRef"].get("fieldPath", "")))
        elif "resourceFieldRef" in source:
            value = resource_value(container, source["resourceFieldRef"])
        else:
            raise ConfigError("CreateContainerConfigError", f"unsupported valueFrom for {name}")
        if value is not None:
            env[name] = value
    return env


def command_line(
    container: JSON, entrypoint: tuple[str, ...], cmd: tuple[str, ...], env: Mapping[str, str]
) -> list[str]:
    """Kubernetes' rules: `command` replaces ENTRYPOINT (and drops CMD), `args` replaces CMD."""
    command, args = container.get("command"), container.get("args")
    if command:
        argv = [*command, *(args or [])]
    else:
        argv = [*entrypoint, *(args if args is not None else cmd)]
    if not argv:
        raise ConfigError("CreateContainerError", "no command specified")
    return [expand(str(a), env) for a in argv]


def volume_files(pod: JSON, volume: JSON, lookup: Lookup) -> dict[str, tuple[bytes, int]] | None:
    """The files of a ConfigMap/Secret/projected volume (relative path -> (content, mode)),
    or None for other kinds. ConfigError (`FailedMount`) for a missing object or key."""
    namespace = pod["metadata"]["namespace"]
    sources: list[tuple[str, JSON]] = []
    if "configMap" in volume:
        sources.append(("configmaps", volume["configMap"]))
    elif "secret" in volume:
        ref = dict(volume["secret"])
        ref["name"] = ref.get("secretName", "")
        sources.append(("secrets", ref))
    elif "projected" in volume:
        for item in volume["projected"].get("sources") or []:
            if "configMap" in item:
                sources.append(("configmaps", item["configMap"]))
            elif "secret" in item:
                sources.append(("secrets", item["secret"]))
    else:
        return None
    source = volume.get("configMap") or volume.get("secret") or volume.get("projected") or {}
    default_mode = int(source.get("defaultMode", 0o644))
    files: dict[str, tuple[bytes, int]] = {}
    for plural, ref in sources:
        obj = lookup(plural, namespace, str(ref.get("name", "")))
        lower, _ = _kind(plural)
        if obj is None:
            if ref.get("optional"):
                continue
            raise ConfigError(
                "FailedMount",
                f'MountVolume.SetUp failed for volume "{volume["name"]}" : '
                f'{lower} "{ref.get("name")}" not found',
            )
        data = _decoded(obj, plural)
        items = ref.get("items") or [{"key": k, "path": k} for k in sorted(data)]
        for item in items:
            if item["key"] not in data:
                raise ConfigError(
                    "FailedMount",
                    f'MountVolume.SetUp failed for volume "{volume["name"]}" : configmap '
                    f"references non-existent config key: {item['key']}"
                    if plural == "configmaps"
                    else f'MountVolume.SetUp failed for volume "{volume["name"]}" : secret '
                    f"{namespace}/{ref.get('name')} does not have key {item['key']}",
                )
            files[str(item["path"])] = (data[item["key"]], int(item.get("mode", default_mode)))
    return files
