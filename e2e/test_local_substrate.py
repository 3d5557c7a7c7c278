"""The local substrate's rules, checked without running it (no root needed): KubeRay's pod
building as ray-operator's common/pod.go and job.go write it, the kubelet's environment and
command-line rules, and the images it maps to this repository's Dockerfiles."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
from substrate import images, plans, podspec, raypods, why

CLUSTER: dict[str, Any] = {
    "apiVersion": "ray.io/v1",
    "kind": "RayCluster",
    "metadata": {"name": "job-r0-raycluster-abcde", "namespace": "ns", "uid": "u1"},
    "spec": {
        "headGroupSpec": {
            "rayStartParams": {"dashboard-host": "0.0.0.0", "num-gpus": "0"},
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "ray-head",
                            "image": "img",
                            "resources": {"limits": {"cpu": "1", "memory": "2Gi"}},
                            "ports": [
                                {"name": "gcs-server", "containerPort": 6379},
                                {"name": "dashboard", "containerPort": 8265},
                            ],
                        }
                    ]
                }
            },
        },
        "workerGroupSpecs": [
            {
                "groupName": "cpu4",
                "replicas": 1,
                "minReplicas": 1,
                "maxReplicas": 1,
                "rayStartParams": {"num-gpus": "0", "resources": "'{\"GPU-like\": 4}'"},
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "ray-worker",
                                "image": "img",
                                "env": [{"name": "USER_VAR", "value": "x"}],
                                "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}},
                            }
                        ]
                    }
                },
            },
        ],
    },
}
FQDN = "job-r0-raycluster-abcde-head-svc.ns.svc.cluster.local"
NOT_FOUND = '"rlhf-operator": executable file not found in $PATH'


def test_ray_start_lines_are_kuberays() -> None:
    head = raypods.build_pod(CLUSTER, "head", CLUSTER["spec"]["headGroupSpec"])
    worker = raypods.build_pod(CLUSTER, "worker", CLUSTER["spec"]["workerGroupSpecs"][0])
    assert head["spec"]["containers"][0]["command"] == ["/bin/bash", "-c", "--"]
    assert head["spec"]["containers"][0]["args"] == [
        "ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}; ray start --head --block "
        "--dashboard-agent-listen-port=52365 --dashboard-host=0.0.0.0 --memory=2147483648 "
        "--metrics-export-port=8080 --num-cpus=1 --num-gpus=0"
    ]
    assert worker["spec"]["containers"][0]["args"] == [
        f"ulimit -n ${{RAY_START_ULIMIT_OPEN_FILES:-65536}}; ray start --address={FQDN}:6379 "
        "--block --dashboard-agent-listen-port=52365 --memory=1073741824 "
        "--metrics-export-port=8080 --num-cpus=1 --num-gpus=0 --resources='{\"GPU-like\": 4}'"
    ]
    assert worker["metadata"]["generateName"] == "job-r0-raycluster-abcde-cpu4-worker-"
    assert worker["metadata"]["labels"]["ray.io/node-type"] == "worker"


def test_overwrite_container_cmd_keeps_our_command_and_hands_over_kuberays() -> None:
    """ray.io/overwrite-container-cmd on the RayCluster (copied from the RayJob) or on the
    template: the container's command stays, KubeRay's line is in KUBERAY_GEN_RAY_START_CMD."""
    ours = {"command": ["/bin/bash", "-c", "--"], "args": ['exec x "$KUBERAY_GEN_RAY_START_CMD"']}
    on_cluster = copy.deepcopy(CLUSTER)
    on_cluster["metadata"]["annotations"] = {"ray.io/overwrite-container-cmd": "true"}
    on_template = copy.deepcopy(CLUSTER)
    group = on_template["spec"]["workerGroupSpecs"][0]
    group["template"]["metadata"] = {"annotations": {"ray.io/overwrite-container-cmd": "true"}}
    for cluster in (on_cluster, on_template):
        group = cluster["spec"]["workerGroupSpecs"][0]
        group["template"]["spec"]["containers"][0].update(copy.deepcopy(ours))
        worker = raypods.build_pod(cluster, "worker", group)
        container = worker["spec"]["containers"][0]
        assert {k: container[k] for k in ours} == ours
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["KUBERAY_GEN_RAY_START_CMD"].startswith("ray start --address=")
        assert worker["metadata"]["annotations"]["ray.io/overwrite-container-cmd"] == "true"


def test_kuberay_env_init_container_and_shared_memory() -> None:
    worker = raypods.build_pod(CLUSTER, "worker", CLUSTER["spec"]["workerGroupSpecs"][0])
    env = {e["name"]: e for e in worker["spec"]["containers"][0]["env"]}
    assert env["RAY_ADDRESS"]["value"] == f"{FQDN}:6379"
    assert env["FQ_RAY_IP"]["value"] == FQDN and env["USER_VAR"]["value"] == "x"
    assert env["RAY_CLUSTER_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.labels['ray.io/cluster']"
    )
    init = worker["spec"]["initContainers"][0]
    assert (
        init["name"] == "wait-gcs-ready"
        and f"ray health-check --address {FQDN}:6379" in init["args"][0]
    )
    assert {"name": "shared-mem", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}} in worker[
        "spec"
    ]["volumes"]
    service = raypods.head_service({**CLUSTER})
    assert (
        service["spec"]["clusterIP"] == "None" and service["metadata"]["name"] == FQDN.split(".")[0]
    )


def test_submitter_follows_a_submitted_job_or_submits_it() -> None:
    job = {
        "spec": {"entrypoint": " python -m x "},
        "status": {"dashboardURL": "svc.ns.svc.cluster.local:8265", "jobId": "job-r0-xyz"},
    }
    address = "http://svc.ns.svc.cluster.local:8265"
    assert " ".join(raypods.submitter_command(job)) == (
        f"if ray job status --address {address} job-r0-xyz >/dev/null 2>&1 ; then ray job logs "
        f"--address {address} --follow job-r0-xyz ; else ray job submit --address {address} "
        "--submission-id job-r0-xyz -- python -m x ; fi"
    )


def test_environment_follows_the_kubelets_rules() -> None:
    secret = {"data": {"token": "czNjcjN0"}}  # base64 of "s3cr3t"
    objects = {("secrets", "hf"): secret}

    def lookup(plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return objects.get((plural, name))

    pod = {
        "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"}},
        "status": {"podIP": "10.0.0.2"},
    }
    container = {
        "env": [
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "LABEL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['a']"}}},
            {"name": "BOTH", "value": "$(IP)/$(UNDEFINED)/$$(IP)"},
        ]
    }
    env = podspec.environment(pod, container, lookup, {"PATH": "/bin"})
    assert (env["TOKEN"], env["IP"], env["LABEL"]) == ("s3cr3t", "10.0.0.2", "b")
    assert env["BOTH"] == "10.0.0.2/$(UNDEFINED)/$(IP)"
    missing = {"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}}]}
    with pytest.raises(podspec.ConfigError) as error:
        podspec.environment(pod, missing, lookup, {})
    assert (error.value.reason, error.value.message) == (
        "CreateContainerConfigError",
        'secret "nope" not found',
    )


@pytest.mark.parametrize(
    ("command", "args", "expected"),
    [
        (None, None, ["python", "-m", "rlhf_trainer", "--help"]),
        (None, ["run"], ["python", "-m", "rlhf_trainer", "run"]),
        (["ls"], None, ["ls"]),
        (["echo"], ["$(HOME)"], ["echo", "/home/ray"]),
    ],
    ids=["image-defaults", "args-replace-cmd", "command-drops-cmd", "expansion"],
)
def test_command_line(
    command: list[str] | None, args: list[str] | None, expected: list[str]
) -> None:
    container = {"command": command, "args": args}
    entrypoint, cmd = ("python", "-m", "rlhf_trainer"), ("--help",)
    assert podspec.command_line(container, entrypoint, cmd, {"HOME": "/home/ray"}) == expected


def test_images_are_this_repositorys_dockerfiles() -> None:
    trainer = images.load("registry.example/rlhf-trainer-cpu:e2e")
    assert (trainer.uid, trainer.home, trainer.workdir) == (1000, "/home/ray", "/home/ray")
    assert trainer.entrypoint == ("python", "-m", "rlhf_trainer")
    assert trainer.env["PATH"].startswith(str(images.VENV_BIN))
    operator = images.load("ghcr.io/rlhf-operator/rlhf-operator:0.1.0")
    assert (operator.uid, operator.home, operator.entrypoint) == (65532, "/tmp", ("rlhf-operator",))
    with pytest.raises(images.ImageError) as error:
        images.load("nvcr.io/nvidia/pytorch:24.01")
    assert error.value.reason == "ErrImagePull"


def test_token_authentication_reaches_every_ray_container() -> None:
    cluster = {
        **CLUSTER,
        "spec": {**CLUSTER["spec"], "authOptions": {"mode": "token", "secretName": "tok"}},
    }
    worker = raypods.build_pod(cluster, "worker", cluster["spec"]["workerGroupSpecs"][0])
    job = {
        "metadata": {"name": "job-r0", "namespace": "ns", "uid": "u2"},
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "spec": {"entrypoint": "python -m x"},
        "status": {"dashboardURL": "svc:8265", "jobId": "job-r0-xyz"},
    }
    submitter = raypods.submitter_job(job, cluster)["spec"]["template"]["spec"]["containers"][0]
    for container in (
        worker["spec"]["containers"][0],
        worker["spec"]["initContainers"][0],
        submitter,
    ):
        env = {e["name"]: e for e in container["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token"
        assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == {
            "name": "tok",
            "key": "auth_token",
        }


def _plan_with_volume_at(mount_path: str) -> dict[str, Any]:
    cluster = plans.Cluster(Path("/state"), "198.18.213.1", 443, Path("/state/ca.crt"))
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {}}
    container = {
        "name": "c",
        "image": "rlhf-operator:local",
        "volumeMounts": [{"name": "tmp", "mountPath": mount_path}],
    }
    return plans.container_plan(
        cluster,
        pod,
        container,
        images.load("rlhf-operator:local"),
        lambda plural, namespace, name: None,
        volumes={"tmp": (Path("/state/pods/p/volumes/tmp"), False)},
        kubelet_files={},
        container_dir=Path("/state/pods/p/c"),
    )


def test_the_images_python_shows_through_a_volume_that_covers_the_checkout() -> None:
    """The operator mounts an emptyDir at /tmp; with the checkout (the local image's Python)
    under /tmp that volume hid the venv and the container could not exec (exit 128). Whatever
    volume covers the checkout, its venv and its interpreter are bound back over it, read-only,
    after it (container.py mounts in depth order). A volume mounted on the checkout itself
    replaces it, though not the venv inside it."""
    parent = str(images.REPO.parent)
    mounts = _plan_with_volume_at(parent)["mounts"]
    assert mounts[0]["target"] == parent and "image" not in mounts[0]
    back = {m["target"]: m for m in mounts[1:]}
    assert str(images.REPO) in back and str(Path(sys.prefix)) in back
    assert all(m["source"] == t and m["readOnly"] and parent in m["image"] for t, m in back.items())
    exact = _plan_with_volume_at(str(images.REPO))["mounts"]  # replaces the checkout itself
    inside = [p for p in {sys.prefix, sys.base_prefix} if p.startswith(f"{images.REPO}/")]
    assert sorted(m["target"] for m in exact if "image" in m) == sorted(inside)
    elsewhere = _plan_with_volume_at("/var/lib/unrelated")["mounts"]
    assert [m["target"] for m in elsewhere] == ["/var/lib/unrelated"]


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (
            {
                "containerStatuses": [
                    {
                        "name": "operator",
                        "restartCount": 3,
                        "state": {
                            "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}
                        },
                        "lastState": {
                            "terminated": {
                                "reason": "StartError",
                                "exitCode": 128,
                                "message": f"exec: {NOT_FOUND}",
                            }
                        },
                    }
                ]
            },
            [
                (
                    "op-1",
                    "operator",
                    True,
                    "now waiting: CrashLoopBackOff: back-off 40s; last attempt terminated: "
                    f"StartError, exit code 128: exec: {NOT_FOUND}; restarts 3",
                )
            ],
        ),
        (
            {
                "containerStatuses": [
                    {"name": "operator", "state": {"running": {}}, "lastState": {}}
                ]
            },
            [("op-1", "operator", False, "now running; restarts 0")],
        ),
        ({}, []),
    ],
    ids=["crash-looping-start-error", "running-not-ready", "not-started"],
)
def test_why_names_each_containers_state_and_start_error(
    status: dict[str, Any], expected: list[tuple[str, str, bool, str]]
) -> None:
    pods = {"items": [{"metadata": {"name": "op-1"}, "status": status}]}
    assert why.containers(pods) == expected


def _kubelet(tmp_path: Path) -> Any:
    """The kubelet over an in-process API server, for its API-facing rules (no pods run)."""
    from substrate.kubelet import Kubelet

    from emulator import Emulator

    api = Emulator()
    api.create_namespace("ns")
    cluster = plans.Cluster(tmp_path, "10.0.0.1", 443, tmp_path / "ca.crt")
    return Kubelet(api, runtime=None, cluster=cluster, security=None)  # type: ignore[arg-type]


def test_the_kubelet_keeps_the_disruption_target_an_eviction_set(tmp_path: Path) -> None:
    kubelet = _kubelet(tmp_path)
    api = kubelet.api
    pod = api.create("pods", {"metadata": {"name": "p"}, "spec": {"containers": []}}, "ns")
    target = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    api.patch("pods", "p", {"status": {"conditions": [target]}}, "ns", subresource="status")
    kubelet.set_status(
        pod, {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    )
    conditions = api.find("pods", "p", "ns")["status"]["conditions"]
    assert [c["type"] for c in conditions] == ["Ready", "DisruptionTarget"]


def test_a_terminating_head_stays_behind_its_headless_service(tmp_path: Path) -> None:
    """KubeRay's head Service publishes not-ready addresses: its workers still reach a head in
    its grace period (the preStop hooks' checkpoint needs it), as the EndpointSlice controller
    keeps terminating pods of such a Service; another Service drops them."""
    kubelet = _kubelet(tmp_path)
    api = kubelet.api
    labels = {"app": "head"}
    body = {
        "metadata": {"name": "head", "labels": labels},
        "spec": {"nodeName": "rlhf-substrate", "containers": []},
    }
    api.create("pods", body, "ns")
    api.patch(
        "pods",
        "head",
        {"status": {"phase": "Running", "podIP": "10.0.0.7"}},
        "ns",
        subresource="status",
    )
    for name, publish in (("head-svc", True), ("plain-svc", False)):
        spec = {"selector": labels, "clusterIP": "None", "publishNotReadyAddresses": publish}
        api.create("services", {"metadata": {"name": name}, "spec": spec}, "ns")
    api.delete("pods", "head", "ns")  # bound and running: terminating, not gone
    assert api.find("pods", "head", "ns")["metadata"].get("deletionTimestamp")
    services = kubelet.services()
    assert services["head-svc.ns"] == ("ns", ["10.0.0.7"])
    assert services["plain-svc.ns"] == ("ns", [])
