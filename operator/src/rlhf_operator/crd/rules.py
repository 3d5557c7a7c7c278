"""CEL rules (`x-kubernetes-validations`) attached to the generated CRD, by schema path.

The API server enforces these before anything reaches the operator: immutable fields and the
cross-field rules that CEL can express. The same rules (and more) run in pydantic
(`rlhf_trainer.config.rules`); `rlhf validate` and the operator report those.
Paths are dotted property names from the RLHFJob root; `[]` steps into list items.
"""

from __future__ import annotations

from typing import TypedDict

from rlhf_trainer.config.algorithm import (
    GROUP_ALGORITHMS,
    ITERATIVE_ALGORITHMS,
    ONLINE_ALGORITHMS,
    AlgorithmName,
)
from rlhf_trainer.config.env_rules import (
    CREDENTIAL_ENV_VARS,
    CREDENTIAL_PATTERN,
    RESERVED_NAMES,
    RESERVED_PREFIXES,
    TUNABLE_RLHF_ENV,
)
from rlhf_trainer.config.models import SOURCE_KEYS
from rlhf_trainer.config.sources import SINGLE_ROLES


class Rule(TypedDict, total=False):
    rule: str
    message: str
    fieldPath: str
    reason: str


def _cel_list(algorithms: frozenset[AlgorithmName]) -> str:
    return "[" + ", ".join(sorted(f"'{a.value}'" for a in algorithms)) + "]"


GROUP = _cel_list(GROUP_ALGORITHMS)
ONLINE = _cel_list(ONLINE_ALGORITHMS)
# Online algorithms that learn from reward sources (on-policy distillation's is the teacher).
REWARDED = _cel_list(frozenset(a for a in AlgorithmName if a.needs_reward_source))
# Online algorithms that train on every sample of a step (an iterative round trains on what
# it selected, however many).
EVERY_SAMPLE = _cel_list(ONLINE_ALGORITHMS - ITERATIVE_ALGORITHMS)
NO_REFERENCE = _cel_list(frozenset(a for a in AlgorithmName if not a.needs_reference))
ITERATIVE = _cel_list(ITERATIVE_ALGORITHMS)
# When the spec places no reference model, as `rlhf_trainer.config.roles.uses_reference` says:
# an algorithm without one, an iterative round whose reference is the round's start policy,
# or an online algorithm without a KL term (klCoef 0). Colocation binds only placed roles.
NO_REFERENCE_PLACED = (
    f"self.algorithm.name in {NO_REFERENCE} || (self.algorithm.name in {ITERATIVE} ? "
    f"self.algorithm.refreshReference : (self.algorithm.name in {ONLINE} && "
    "self.algorithm.klCoef == 0.0))"
)

_IMMUTABLE = "self == oldSelf"

_EXACTLY_ONE_MODEL_SOURCE: Rule = {
    "rule": "[has(self.pretrained), has(self.randomInit), has(self.fromJob), "
    "has(self.fromStage)].filter(x, x).size() == 1",
    "message": f"set exactly one of {SOURCE_KEYS}",
}


def _cel_strings(values: frozenset[str] | set[str]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in sorted(values)) + "]"


# spec.env: the names rlhf_trainer.config.env_rules refuses, in the same words' short form.
_PREFIXES = " || ".join(f"self.name.startsWith('{p}')" for p in RESERVED_PREFIXES)
ENV_RULES: list[Rule] = [
    {
        "rule": f"!(self.name in {_cel_strings(RESERVED_NAMES)}) && !({_PREFIXES}) && "
        f"(!self.name.startsWith('RLHF_') || self.name in {_cel_strings(TUNABLE_RLHF_ENV)})",
        "message": "reserved: set by the operator, KubeRay or Kubernetes, or it changes which "
        "code runs (rlhf validate says why)",
        "fieldPath": ".name",
    },
    {
        "rule": f"!(self.name in {_cel_strings(set(CREDENTIAL_ENV_VARS))} || "
        f"self.name.matches('{CREDENTIAL_PATTERN}')) || "
        "(has(self.valueFrom) && has(self.valueFrom.secretKeyRef))",
        "message": "a credential: set it by valueFrom.secretKeyRef, never inline",
        "fieldPath": ".name",
    },
]

# spec.placement.tolerations[]: what the API server checks of a pod's tolerations.
TOLERATION_RULES: list[Rule] = [
    {
        "rule": "self.operator != 'Exists' || !has(self.value) || self.value == ''",
        "message": "value must be empty with operator: Exists",
        "fieldPath": ".value",
    },
    {
        "rule": "(has(self.key) && self.key != '') || self.operator == 'Exists'",
        "message": "operator must be Exists when key is empty",
        "fieldPath": ".operator",
    },
    {
        "rule": "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
        "message": "tolerationSeconds only with effect: NoExecute",
        "fieldPath": ".tolerationSeconds",
    },
]

RULES: dict[str, list[Rule]] = {
    "spec.env[]": ENV_RULES,
    "spec.placement.tolerations[]": TOLERATION_RULES,
    "": [
        {
            "rule": "self.metadata.name.size() <= 40",
            "message": "metadata.name must be at most 40 characters (children derive their "
            "names from it)",
        },
    ],
    "spec.algorithm": [
        {
            "rule": _IMMUTABLE,
            "message": "spec.algorithm is immutable: create a new RLHFJob to change it",
        },
    ],
    "spec.models": [
        {
            "rule": _IMMUTABLE,
            "message": "spec.models is immutable: create a new RLHFJob to change models",
        },
    ],
    "spec.data": [
        {
            "rule": _IMMUTABLE,
            "message": "spec.data is immutable: create a new RLHFJob to change data sets",
        },
    ],
    "spec.models.actor": [_EXACTLY_ONE_MODEL_SOURCE],
    "spec.models.critic": [_EXACTLY_ONE_MODEL_SOURCE],
    "spec.models.reference": [_EXACTLY_ONE_MODEL_SOURCE],
    "spec.models.teacher": [_EXACTLY_ONE_MODEL_SOURCE],
    "spec.models.rewardModels[]": [_EXACTLY_ONE_MODEL_SOURCE],
    "spec.models.rewardFunction": [
        {
            "rule": "[has(self.path), has(self.configMapRef), has(self.builtin)]"
            ".filter(x, x).size() == 1",
            "message": "set exactly one of path, configMapRef or builtin",
        }
    ],
    "spec.data.train[]": [
        {
            "rule": "[has(self.path), has(self.hfId), has(self.builtin)].filter(x, x).size() == 1",
            "message": "set exactly one of path, hfId or builtin",
        }
    ],
    "spec.data.eval[]": [
        {
            "rule": "[has(self.path), has(self.hfId), has(self.builtin)].filter(x, x).size() == 1",
            "message": "set exactly one of path, hfId or builtin",
        }
    ],
    "spec.checkpoint.storage": [
        {
            "rule": "has(self.claimName) != has(self.size)",
            "message": "set exactly one of claimName (existing PVC) or size (new PVC)",
        }
    ],
    "spec": [
        {
            "rule": f"!(self.algorithm.name in {GROUP}) || self.rollout.samplesPerPrompt > 1",
            "message": "rollout.samplesPerPrompt must be > 1 for group estimators "
            "(grpo, dr-grpo, rloo, reinforce++-baseline)",
            "fieldPath": ".rollout.samplesPerPrompt",
        },
        {
            "rule": f"!(self.algorithm.name in {REWARDED}) || "
            "(has(self.models.rewardModels) && size(self.models.rewardModels) > 0) || "
            "has(self.models.rewardFunction) || has(self.models.remoteReward) || "
            "has(self.models.graderReward)",
            "message": "online algorithms (but on-policy-distillation) need a reward source: "
            "set models.rewardModels, "
            "models.rewardFunction, models.remoteReward or models.graderReward",
            "fieldPath": ".models",
        },
        {
            "rule": "self.training.trainBatchSize % "
            "(self.training.microTrainBatchSize * self.placement.actorGpus) == 0",
            "message": "training.trainBatchSize must be divisible by "
            "training.microTrainBatchSize x placement.actorGpus",
            "fieldPath": ".training.trainBatchSize",
        },
        {
            "rule": f"!(self.algorithm.name in {EVERY_SAMPLE}) || "
            "(self.training.rolloutBatchSize * self.rollout.samplesPerPrompt) "
            "% self.training.trainBatchSize == 0",
            "message": "training.trainBatchSize must divide "
            "training.rolloutBatchSize x rollout.samplesPerPrompt",
            "fieldPath": ".training.trainBatchSize",
        },
        {
            "rule": "self.placement.device != 'gpu' || "
            "self.rollout.tensorParallelSize <= self.placement.gpusPerNode",
            "message": "rollout.tensorParallelSize must fit on one node (<= placement.gpusPerNode)",
            "fieldPath": ".rollout.tensorParallelSize",
        },
        {
            "rule": "!self.rollout.enableSleep || self.placement.colocateAll",
            "message": "rollout.enableSleep needs placement.colocateAll: true",
            "fieldPath": ".rollout.enableSleep",
        },
        {
            "rule": "self.algorithm.name != 'cdpo' || self.algorithm.labelSmoothing > 0.0",
            "message": "algorithm.labelSmoothing must be > 0 for cdpo",
            "fieldPath": ".algorithm.labelSmoothing",
        },
        {
            "rule": "!self.training.adamOffload || self.training.zeroStage >= 1",
            "message": "training.adamOffload needs training.zeroStage >= 1",
            "fieldPath": ".training.adamOffload",
        },
        {
            "rule": f"!self.placement.colocateActorReference || {NO_REFERENCE_PLACED} || "
            "self.placement.actorGpus == self.placement.referenceGpus",
            "message": "placement.colocateActorReference needs actorGpus == referenceGpus",
            "fieldPath": ".placement.colocateActorReference",
        },
        {
            "rule": "!self.placement.colocateActorReference || "
            "self.algorithm.name != 'distillation' || "
            "self.placement.actorGpus == self.placement.teacherGpus",
            "message": "placement.colocateActorReference needs actorGpus == teacherGpus for "
            "distillation",
            "fieldPath": ".placement.colocateActorReference",
        },
    ],
    "spec.models.actor.randomInit": [
        {
            "rule": "self.hiddenSize % self.numHeads == 0",
            "message": "hiddenSize must be divisible by numHeads",
            "fieldPath": ".hiddenSize",
        }
    ],
}

# The stages of an RLHFPipeline are RLHFJob specs: the same rule for each model source.
PIPELINE_RULES: dict[str, list[Rule]] = {
    f"spec.stages[].spec.models.{role}": [_EXACTLY_ONE_MODEL_SOURCE]
    for role in (*SINGLE_ROLES, "rewardModels[]")
} | {
    "spec.stages[].spec.env[]": ENV_RULES,
    "spec.stages[].spec.placement.tolerations[]": TOLERATION_RULES,
}
