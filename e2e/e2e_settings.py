"""What the e2e suite runs against, from the environment (see e2e/README.md)."""

from __future__ import annotations

import os

KUBECONFIG = os.environ.get("E2E_KUBECONFIG", "")
# Without E2E_KUBECONFIG the journey runs on the local substrate (e2e/local/, started by the
# suite): the same tests, this machine playing the cluster.
LOCAL = not KUBECONFIG
OPERATOR_IMAGE = os.environ.get("E2E_OPERATOR_IMAGE", "rlhf-operator:e2e")
TRAINER_IMAGE = os.environ.get("E2E_TRAINER_IMAGE", "rlhf-trainer-cpu:e2e")
NAMESPACE = os.environ.get("E2E_NAMESPACE", "rlhf-e2e")
OPERATOR_NAMESPACE = "rlhf-system"
RELEASE = "rlhf-operator"
# The whole tiny run, pods and image start included; kind on a laptop takes ~5-15 minutes.
TIMEOUT = float(os.environ.get("E2E_TIMEOUT_SECONDS", "1800"))
# Training steps of the e2e job: the journey proves the path, not the learning (trainer tests do).
MAX_STEPS = int(os.environ.get("E2E_MAX_STEPS", "10"))
# E2E_KEEP=1 leaves the release and the namespace behind for a look with kubectl.
KEEP = os.environ.get("E2E_KEEP", "") == "1"
