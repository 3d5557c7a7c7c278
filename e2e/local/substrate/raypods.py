"""KubeRay's builders, followed rule by rule (pure): the head Service, the head and worker pods of
a RayCluster, and the submitter Job of a RayJob in K8sJobMode. Sources, in ray-project/kuberay's
ray-operator/controllers/ray: common/pod.go (DefaultHeadPodTemplate, DefaultWorkerPodTemplate,
BuildPod, setMissingRayStartParams, generateRayStartCommand, convertParamMap,
setContainerEnvVars, initLivenessAndReadinessProbe), common/service.go (BuildServiceForHeadPod:
headless by default), common/job.go (GetK8sJobCommand), rayjob_controller.go
(getSubmitterTemplate, createNewK8sJob) and utils (names, labels, constants). Features the
operator's RayJobs do not use (autoscaler, GCS fault tolerance, TLS, auth, RayService) are left
out.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from . import podspec

JSON = dict[str, Any]
GCS_PORT, DASHBOARD_PORT, CLIENT_PORT, METRICS_PORT = 6379, 8265, 10001, 8080
AGENT_PORT = 52365
HEALTH_PATH = "/api/healthz"  # the dashboard agent's unified health check (Ray >= 2.53)
CLUSTER_DOMAIN = "cluster.local"
APP_LABELS = {
    "app.kubernetes.io/name": "kuberay",
    "app.kubernetes.io/created-by": "kuberay-operator",
}
# KubeRay >= 1.4 no longer runs a login shell.
SHELL = ["/bin/bash", "-c", "--"]
SUBMITTER_SHELL = ["/bin/bash", "-ce", "--"]


def check_name(name: str) -> str:
    """utils.CheckName: at most 50 characters (cut from the front), no leading digit."""
    if len(name) > 50:
        name = name[len(name) - 50 :]
    if name[0].isdigit() or not name[0].isalnum():
        name = "r" + name[1:]
    return name


def head_service_name(cluster: str) -> str:
    return check_name(f"{cluster}-head-svc")


def fqdn(cluster: str, namespace: str) -> str:
    return f"{head_service_name(cluster)}.{namespace}.svc.{CLUSTER_DOMAIN}"


def owner(obj: JSON) -> JSON:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def head_port(cluster: JSON) -> str:
    return str(cluster["spec"]["headGroupSpec"].get("rayStartParams", {}).get("port", GCS_PORT))


def _ports(container: JSON) -> dict[str, int]:
    return {
        str(p.get("name") or f"{p['containerPort']}-port"): int(p["containerPort"])
        for p in container.get("ports") or []
    }


def head_service(cluster: JSON) -> JSON:
    name = cluster["metadata"]["name"]
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    ports = _ports(head) or {
        "client": CLIENT_PORT,
        "gcs-server": GCS_PORT,
        "dashboard": DASHBOARD_PORT,
        "serve": 8000,
    }
    ports.setdefault("metrics", METRICS_PORT)
    labels = {
        "ray.io/cluster": name,
        "ray.io/node-type": "head",
        "ray.io/identifier": f"{name}-head",
        **APP_LABELS,
    }
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": head_service_name(name),
            "namespace": cluster["metadata"]["namespace"],
            "labels": labels,
            "ownerReferences": [owner(cluster)],
        },
        "spec": {
            "selector": {"ray.io/cluster": name, "ray.io/node-type": "head"},
            "ports": [
                {"name": n, "port": p, "targetPort": p, "protocol": "TCP", "appProtocol": "tcp"}
                for n, p in sorted(ports.items())
            ],
            "type": "ClusterIP",
            # Without ENABLE_RAY_HEAD_CLUSTER_IP_SERVICE the head service is headless.
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
        },
    }


AUTH_TOKEN_KEY = "auth_token"  # utils.RAY_AUTH_TOKEN_SECRET_KEY


def auth_secret(cluster_spec: JSON, cluster_name: str) -> str | None:
    """The Secret holding the Ray token when `authOptions.mode` is token (KubeRay makes one
    named after the cluster when `secretName` is not given), else None."""
    options = cluster_spec.get("authOptions") or {}
    if options.get("mode") != "token":
        return None
    return str(options.get("secretName") or check_name(cluster_name))


def with_token_env(container: JSON, secret: str) -> None:
    """SetContainerTokenAuthEnvVars: RAY_AUTH_MODE and RAY_AUTH_TOKEN, unless already set."""
    env = list(container.get("env") or [])
    names = {e["name"] for e in env}
    if "RAY_AUTH_MODE" not in names:
        env.append(_env("RAY_AUTH_MODE", "token"))
    if "RAY_AUTH_TOKEN" not in names:
        ref = {"secretKeyRef": {"name": secret, "key": AUTH_TOKEN_KEY}}
        env.append({"name": "RAY_AUTH_TOKEN", "valueFrom": ref})
    container["env"] = env


def start_params(params: dict[str, str], node_type: str, address: str) -> dict[str, str]:
    """setMissingRayStartParams."""
    params = dict(params)
    if node_type == "worker":
        params.setdefault("address", address)
    else:
        params.setdefault("dashboard-host", "0.0.0.0")
    params.setdefault("metrics-export-port", str(METRICS_PORT))
    params["block"] = "true"
    params.setdefault("dashboard-agent-listen-port", str(AGENT_PORT))
    return params


def ray_start_command(node_type: str, params: dict[str, str], resources: JSON) -> str:
    """generateRayStartCommand + convertParamMap (sorted flags; "true" is a bare switch)."""
    params = dict(params)
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    if "num-cpus" not in params:
        cpu = limits.get("cpu") or requests.get("cpu")
        if cpu is not None and podspec.quantity(cpu) != 0:
            params["num-cpus"] = str(podspec.quantity_value(cpu))
    if "memory" not in params and limits.get("memory") is not None:
        params["memory"] = str(podspec.quantity_value(limits["memory"]))
    for key in sorted(limits):
        if "num-gpus" not in params and key.endswith("gpu") and podspec.quantity(limits[key]):
            params["num-gpus"] = str(podspec.quantity_value(limits[key]))
    flags = []
    special = ("log-color", "include-dashboard", "include-log-monitor")
    for key in sorted(params):
        value = params[key]
        if value.lower() in ("true", "false") and key not in special:
            if value.lower() == "true":
                flags.append(f"--{key}")
        else:
            flags.append(f"--{key}={value}")
    head = " --head" if node_type == "head" else ""
    return f"ray start{head} {' '.join(flags)}"


def _env(name: str, value: str | None = None, field: str | None = None) -> JSON:
    if field is not None:
        return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field}}}
    return {"name": name, "value": value}


def _probe(node_type: str, liveness: bool) -> JSON:
    """initLivenessAndReadinessProbe with the unified HTTP health check of Ray >= 2.53."""
    return {
        "httpGet": {"path": HEALTH_PATH, "port": AGENT_PORT},
        "initialDelaySeconds": 30 if liveness else 10,
        "timeoutSeconds": 5 if node_type == "head" else 2,
        "periodSeconds": 5,
        "successThreshold": 1,
        "failureThreshold": 120 if liveness else 10,
    }


OVERWRITE_CMD = "ray.io/overwrite-container-cmd"


def _overwrites(annotations: dict[str, str] | None) -> bool:
    return str((annotations or {}).get(OVERWRITE_CMD, "")).lower() == "true"


def build_pod(cluster: JSON, node_type: str, group: JSON) -> JSON:
    """A head or worker pod: the group's template plus what KubeRay adds to it."""
    name, namespace = cluster["metadata"]["name"], cluster["metadata"]["namespace"]
    group_name = "headgroup" if node_type == "head" else str(group["groupName"])
    template = copy.deepcopy(group["template"])
    spec = template["spec"]
    ray = spec["containers"][0]
    port, address = head_port(cluster), fqdn(name, namespace)
    params = start_params(dict(group.get("rayStartParams") or {}), node_type, f"{address}:{port}")
    labels = {
        **(template.get("metadata", {}).get("labels") or {}),
        "ray.io/is-ray-node": "yes",
        "ray.io/cluster": name,
        "ray.io/node-type": node_type,
        "ray.io/group": group_name,
        "ray.io/identifier": f"{name}-{node_type}",
        **APP_LABELS,
    }
    annotations = dict(template.get("metadata", {}).get("annotations") or {})
    if node_type == "head":
        annotations["ray.io/ft-enabled"] = "false"
    if node_type == "worker":
        init = {
            "name": "wait-gcs-ready",
            "image": ray["image"],
            "imagePullPolicy": ray.get("imagePullPolicy", "IfNotPresent"),
            "command": SHELL,
            "args": [
                "SECONDS=0; while true; do if (( SECONDS <= 120 )); then if ray health-check "
                f'--address {address}:{port} > /dev/null 2>&1; then echo "GCS is ready."; break; '
                'fi; echo "$SECONDS seconds elapsed: Waiting for GCS to be ready."; else if ray '
                f'health-check --address {address}:{port}; then echo "GCS is ready."; break; fi; '
                'echo "$SECONDS seconds elapsed: Still waiting for GCS to be ready."; fi; '
                "sleep 5; done"
            ],
            "securityContext": copy.deepcopy(ray.get("securityContext") or {}),
            "env": copy.deepcopy(ray.get("env") or []),
            "volumeMounts": copy.deepcopy(ray.get("volumeMounts") or []),
            "resources": {
                "limits": {"cpu": "200m", "memory": "256Mi"},
                "requests": {"cpu": "200m", "memory": "256Mi"},
            },
        }
        spec["initContainers"] = [*(spec.get("initContainers") or []), init]
    mounted = {m["mountPath"] for m in ray.get("volumeMounts") or []}
    if "/dev/shm" not in mounted and "plasma-directory" not in params:
        memory = (ray.get("resources") or {}).get("limits", {}).get("memory") or (
            ray.get("resources") or {}
        ).get("requests", {}).get("memory")
        empty: JSON = {"medium": "Memory", **({"sizeLimit": memory} if memory else {})}
        spec["volumes"] = [*(spec.get("volumes") or []), {"name": "shared-mem", "emptyDir": empty}]
        ray["volumeMounts"] = [
            *(ray.get("volumeMounts") or []),
            {"name": "shared-mem", "mountPath": "/dev/shm"},
        ]
    if "metrics" not in _ports(ray):
        ray["ports"] = [
            *(ray.get("ports") or []),
            {"name": "metrics", "containerPort": METRICS_PORT},
        ]
    start = ray_start_command(node_type, params, ray.get("resources") or {})
    # initTemplateAnnotations + BuildPod: with ray.io/overwrite-container-cmd "true" on the
    # RayCluster (or the template) the container's own command stays; the generated `ray
    # start` line is in KUBERAY_GEN_RAY_START_CMD either way.
    if _overwrites(cluster["metadata"].get("annotations")) or _overwrites(annotations):
        annotations[OVERWRITE_CMD] = "true"
    else:
        ray["command"] = SHELL
        ray["args"] = [f"ulimit -n ${{RAY_START_ULIMIT_OPEN_FILES:-65536}}; {start}"]
    for init in spec.get("initContainers") or []:
        init["env"] = [
            *(init.get("env") or []),
            _env("FQ_RAY_IP", address),
            _env("RAY_IP", address.split(".")[0]),
        ]
    env = list(ray.get("env") or [])
    names = {e["name"] for e in env}
    ip = "127.0.0.1" if node_type == "head" else address
    if node_type == "worker":
        env += [_env("FQ_RAY_IP", ip), _env("RAY_IP", ip.split(".")[0])]
    env += [
        _env("RAY_CLUSTER_NAME", field="metadata.labels['ray.io/cluster']"),
        _env("RAY_CLUSTER_NAMESPACE", field="metadata.namespace"),
        _env("RAY_CLOUD_INSTANCE_ID", field="metadata.name"),
        _env("RAY_NODE_TYPE_NAME", field="metadata.labels['ray.io/group']"),
        _env("KUBERAY_GEN_RAY_START_CMD", start),
    ]
    extra = {"RAY_PORT": port, "RAY_ADDRESS": f"{ip}:{port}", "RAY_USAGE_STATS_KUBERAY_IN_USE": "1"}
    env += [_env(k, v) for k, v in extra.items() if k not in names]
    if node_type == "head":
        env.append(_env("RAY_USAGE_STATS_EXTRA_TAGS", "kuberay_version=v1.7.0;kuberay_crd=RayJob"))
    if "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE" not in names:
        env.append(_env("RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE", "1"))
    ray["env"] = env
    secret = auth_secret(cluster["spec"], name)
    if secret is not None:  # configureTokenAuth: the Ray container and wait-gcs-ready
        with_token_env(ray, secret)
        for init in spec.get("initContainers") or []:
            if init["name"] == "wait-gcs-ready":
                with_token_env(init, secret)
    ray.setdefault("livenessProbe", _probe(node_type, True))
    ray.setdefault("readinessProbe", _probe(node_type, False))
    # utils.PodGenerateName: the prefix (cut to 50 characters) + "-head-" or "-worker-".
    prefix = (name if node_type == "head" else f"{name}-{group_name}")[:50]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{prefix}-{node_type}-".lower(),
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner(cluster)],
        },
        "spec": spec,
    }


def submitter_command(job: JSON) -> list[str]:
    """GetK8sJobCommand: follow a job already submitted (a retried submitter), else submit."""
    status, spec = job.get("status") or {}, job["spec"]
    address = status["dashboardURL"]
    address = address if address.startswith("http://") else f"http://{address}"
    job_id = status["jobId"]
    command = [
        "if",
        "ray",
        "job",
        "status",
        "--address",
        address,
        job_id,
        ">/dev/null",
        "2>&1",
        ";",
    ]
    command += ["then", "ray", "job", "logs", "--address", address, "--follow", job_id, ";"]
    command += ["else", "ray", "job", "submit", "--address", address]
    if spec.get("runtimeEnvYAML"):
        raise ValueError("runtimeEnvYAML is not supported by the local substrate's KubeRay")
    if spec.get("metadata"):
        command += ["--metadata-json", json.dumps(json.dumps(spec["metadata"]))]
    command += ["--submission-id", job_id]
    if spec.get("entrypointNumCpus"):
        command += ["--entrypoint-num-cpus", f"{float(spec['entrypointNumCpus']):f}"]
    if spec.get("entrypointNumGpus"):
        command += ["--entrypoint-num-gpus", f"{float(spec['entrypointNumGpus']):f}"]
    if spec.get("entrypointResources"):
        command += ["--entrypoint-resources", json.dumps(spec["entrypointResources"])]
    return [*command, "--", str(spec["entrypoint"]).strip(), ";", "fi"]


def submitter_job(job: JSON, cluster: JSON) -> JSON:
    """createNewK8sJob with getSubmitterTemplate: a batch/v1 Job named like the RayJob."""
    spec = job["spec"]
    template = copy.deepcopy(spec.get("submitterPodTemplate") or {})
    if not template:
        head = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
        resources = {
            "limits": {"cpu": "1", "memory": "1Gi"},
            "requests": {"cpu": "500m", "memory": "200Mi"},
        }
        template = {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "ray-job-submitter", "image": head["image"], "resources": resources}
                ],
            }
        }
    container = template["spec"]["containers"][0]
    if not container.get("command"):
        container["command"] = SUBMITTER_SHELL
        container["args"] = [" ".join(submitter_command(job))]
    container["env"] = [
        *(container.get("env") or []),
        _env("PYTHONUNBUFFERED", "1"),
        _env("RAY_DASHBOARD_ADDRESS", job["status"]["dashboardURL"]),
        _env("RAY_JOB_SUBMISSION_ID", job["status"]["jobId"]),
    ]
    secret = auth_secret(cluster["spec"], cluster["metadata"]["name"])
    if secret is not None:
        with_token_env(container, secret)
    name = job["metadata"]["name"]
    backoff = (spec.get("submitterConfig") or {}).get("backoffLimit", 2)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": job["metadata"]["namespace"],
            "labels": {
                "ray.io/originated-from-cr-name": name,
                "ray.io/originated-from-crd": "RayJob",
                "app.kubernetes.io/created-by": "kuberay-operator",
            },
            "ownerReferences": [owner(job)],
        },
        "spec": {"backoffLimit": backoff, "template": template},
    }
