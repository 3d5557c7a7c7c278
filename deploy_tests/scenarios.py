"""Chart values the tests render, default and non-default, each with a readable id."""

from __future__ import annotations

from typing import Any

SCENARIOS: dict[str, dict[str, Any]] = {
    "default": {},
    "namespaced": {"watchNamespaces": ["team-a", "team-b"]},
    "peering-cluster-wide": {"replicaCount": 2, "peering": {"enabled": True, "name": "rlhf"}},
    "peering-namespaced": {
        "replicaCount": 2,
        "peering": {"enabled": True, "name": "rlhf"},
        "watchNamespaces": ["team-a"],
    },
    "metrics-servicemonitor": {
        "metrics": {
            "port": 9090,
            "service": {"enabled": True, "annotations": {"example.com/scrape": "true"}},
            "serviceMonitor": {
                "enabled": True,
                "interval": "15s",
                "scrapeTimeout": "10s",
                "labels": {"release": "kube-prometheus-stack"},
            },
        }
    },
    "kuberay-enabled": {"kuberay": {"enabled": True, "watchNamespace": ["team-a"]}},
    "customised": {
        "fullnameOverride": "rlhf-ctl",
        "image": {
            "repository": "registry.example.com/ml/rlhf-operator",
            "digest": "sha256:" + "ab" * 32,
            "pullPolicy": "Always",
        },
        "imagePullSecrets": [{"name": "regcred"}],
        "trainer": {"defaultImage": "registry.example.com/ml/rlhf-trainer:0.1.0-cu128"},
        "logLevel": "DEBUG",
        "serviceAccount": {"create": False, "name": "platform-operator"},
        "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy.example.com:3128"}],
        "priorityClassName": "system-cluster-critical",
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
        "podAnnotations": {"example.com/team": "ml-platform"},
        "podLabels": {"team": "ml-platform"},
        "resources": {"requests": {"cpu": "200m", "memory": "300Mi"}, "limits": {"memory": "1Gi"}},
    },
    "rbac-external": {"rbac": {"create": False}},
    "platform-policy": {
        "policy": {
            "allowedImagePrefixes": ["registry.example.com/ml", "ghcr.io/rlhf-operator/"],
            "allowedPriorityClasses": ["training-low", "training-high"],
            "allowedSchedulerNames": ["volcano"],
            "allowedNodeSelectorKeys": ["nvidia.com/gpu.product"],
            "nodeSelector": {"pool": "ml", "example.com/team": "research"},
            "requireQueueName": True,
        },
        "network": {"kuberayNamespace": "kuberay-system", "apiServerCidrs": ["10.0.0.1/32"]},
    },
}

NAMESPACED = {"namespaced", "peering-namespaced"}
