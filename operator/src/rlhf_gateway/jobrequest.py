"""`POST /v1/fine_tuning/jobs` (pure): OpenAI's request -> one RLHFJob manifest.

The manifest is checked with the shared config models (`load_document`, what `rlhf validate`
and the operator run), and each problem is reported under the request's param that set the
field (`method.dpo.hyperparameters.beta`), in the validator's own words. Fields the request
did not set come from the platform's catalog entry and are named as such.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlhf_trainer.config import AlgorithmName, RolloutConfig, TrainingConfig, load_document

from .errors import ApiError, bad_request
from .settings import CatalogModel

GATEWAY_LABEL = "rlhf.dev/gateway"
GATEWAY_VALUE = "fine-tuning"
REQUEST_ANNOTATION = "rlhf.dev/openai-request"
METADATA_ANNOTATION = "rlhf.dev/openai-metadata"
Auto = Literal["auto"]
MethodType = Literal["supervised", "dpo", "reinforcement"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Hyperparameters(_Strict):
    n_epochs: int | Auto | None = Field(None, description="Passes over the training file.")
    batch_size: int | Auto | None = Field(None, description="Samples per optimiser step.")
    learning_rate_multiplier: float | Auto | None = Field(
        None, description="Scales the base model's learning rate."
    )
    beta: float | Auto | None = Field(None, description="dpo: the preference temperature.")
    eval_interval: int | Auto | None = Field(None, description="reinforcement: steps per eval.")
    eval_samples: int | Auto | None = Field(None, description="reinforcement: samples per eval.")
    compute_multiplier: float | Auto | None = Field(
        None, description="reinforcement: scales the responses sampled per prompt."
    )


class MethodParams(_Strict):
    hyperparameters: Hyperparameters | None = None


class ReinforcementParams(MethodParams):
    grader: dict[str, Any] = Field(description="The grader whose score is the reward.")


class Method(_Strict):
    type: MethodType
    supervised: MethodParams | None = None
    dpo: MethodParams | None = None
    reinforcement: ReinforcementParams | None = None


class CreateJobRequest(_Strict):
    model: str = Field(min_length=1)
    training_file: str = Field(min_length=1)
    validation_file: str | None = None
    hyperparameters: Hyperparameters | None = Field(
        None, description="Deprecated by OpenAI in favour of method.<type>.hyperparameters."
    )
    method: Method | None = None
    suffix: str | None = Field(None, min_length=1, max_length=40, pattern=r"^[a-z0-9][a-z0-9-]*$")
    seed: int | None = Field(None, ge=0)
    metadata: dict[str, str] | None = Field(None, max_length=16)
    integrations: list[dict[str, Any]] | None = None

    def method_type(self) -> MethodType:
        return self.method.type if self.method else "supervised"

    def hyper(self) -> tuple[Hyperparameters, str]:
        """The hyperparameters given and the param path they were given under."""
        kind = self.method_type()
        params = getattr(self.method, kind, None) if self.method else None
        if params is not None and params.hyperparameters is not None:
            return params.hyperparameters, f"method.{kind}.hyperparameters"
        return self.hyperparameters or Hyperparameters(), "hyperparameters"


@dataclass(frozen=True)
class FileRef:
    """An uploaded file as a job reads it."""

    id: str
    location: str
    format: str


@dataclass
class Translation:
    """The spec a request asks for, and which request param set which spec field."""

    spec: dict[str, Any]
    origin: dict[str, str] = field(default_factory=dict)  # camelCase spec path -> param
    # Origins whose inner fields are the request's own (a grader object): a problem at
    # `<path>.x.y` is the param's `x.y`.
    deep: set[str] = field(default_factory=set)

    def set(self, path: str, value: Any, param: str, *, deep: bool = False) -> None:
        node = self.spec
        *parents, leaf = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
        self.origin[path] = param
        if deep:
            self.deep.add(path)


def _given(value: Any) -> bool:
    return value is not None and value != "auto"


def _algorithm(kind: MethodType, rl_algorithm: AlgorithmName) -> AlgorithmName:
    return {"supervised": AlgorithmName.SFT, "dpo": AlgorithmName.DPO}.get(kind, rl_algorithm)


def translate(
    req: CreateJobRequest,
    *,
    base: CatalogModel,
    actor: dict[str, Any],
    training: FileRef,
    validation: FileRef | None,
    rl_algorithm: AlgorithmName,
    reward: dict[str, Any] | None = None,
    object_store: dict[str, Any] | None = None,
) -> Translation:
    """The RLHFJob spec of a request (pure). `actor` is the model source the job trains (the
    catalog's, or `fromJob` of a fine-tuned model); `reward` what a reinforcement job's
    grader becomes in the spec (the trainer's graders); `object_store` how the job reaches
    s3:// files (the platform's store, unless the catalog entry names one)."""
    kind = req.method_type()
    algorithm = _algorithm(kind, rl_algorithm)
    out = Translation(copy.deepcopy(base.spec))
    out.set("algorithm.name", algorithm.value, "method.type")
    out.set("models.actor", actor, "model")
    out.set("data.train", [{"path": training.location}], "training_file")
    # The trainer reads OpenAI's rows as they are (rlhf_trainer.config.finetune_files).
    out.set("data.format", "openai", "training_file")
    if validation is not None:
        out.set("data.eval", [{"path": validation.location}], "validation_file")
    if object_store and training.location.startswith("s3://") and "objectStore" not in out.spec:
        out.set("objectStore", object_store, "training_file")
    if reward is not None:
        for key, value in reward.items():
            out.set(key, value, f"method.{kind}.grader", deep=True)
    hp, where = req.hyper()
    if _given(hp.n_epochs):
        epochs = "training.numEpisodes" if algorithm.is_online else "training.epochs"
        out.set(epochs, hp.n_epochs, f"{where}.n_epochs")
    if _given(hp.batch_size):
        out.set("training.trainBatchSize", hp.batch_size, f"{where}.batch_size")
        if algorithm.is_online:
            out.set("training.rolloutBatchSize", hp.batch_size, f"{where}.batch_size")
    if _given(hp.learning_rate_multiplier):
        base_lr = float(
            (base.spec.get("training") or {}).get("actorLearningRate")
            or TrainingConfig.model_fields["actor_learning_rate"].default
        )
        lr = base_lr * float(hp.learning_rate_multiplier)  # type: ignore[arg-type]
        out.set("training.actorLearningRate", lr, f"{where}.learning_rate_multiplier")
    if _given(hp.beta):
        out.set("algorithm.beta", hp.beta, f"{where}.beta")
    if _given(hp.eval_interval):
        out.set("training.evalEverySteps", hp.eval_interval, f"{where}.eval_interval")
    if _given(hp.eval_samples):
        out.set("training.evalSamples", hp.eval_samples, f"{where}.eval_samples")
    if _given(hp.compute_multiplier):
        samples = int(
            (base.spec.get("rollout") or {}).get("samplesPerPrompt")
            or RolloutConfig.model_fields["samples_per_prompt"].default
        )
        scaled = max(1, round(samples * float(hp.compute_multiplier)))  # type: ignore[arg-type]
        out.set("rollout.samplesPerPrompt", scaled, f"{where}.compute_multiplier")
    if req.seed is not None:
        out.set("training.seed", req.seed, "seed")
    return out


def request_problems(req: CreateJobRequest) -> None:
    """What no spec check can see: params that do not belong to the method asked for."""
    kind = req.method_type()
    if req.method is not None:
        for other in ("supervised", "dpo", "reinforcement"):
            if other != kind and getattr(req.method, other) is not None:
                raise bad_request(
                    f"method.{other}: given, but method.type is {kind!r}", f"method.{other}"
                )
        if kind == "reinforcement" and req.method.reinforcement is None:
            raise bad_request(
                "method.reinforcement: required for method.type 'reinforcement' (its grader)",
                "method.reinforcement",
            )
    hp, where = req.hyper()
    allowed = {
        "supervised": {"n_epochs", "batch_size", "learning_rate_multiplier"},
        "dpo": {"n_epochs", "batch_size", "learning_rate_multiplier", "beta"},
        "reinforcement": {
            "n_epochs",
            "batch_size",
            "learning_rate_multiplier",
            "eval_interval",
            "eval_samples",
            "compute_multiplier",
        },
    }[kind]
    for name in type(hp).model_fields:
        if getattr(hp, name) is not None and name not in allowed:
            raise bad_request(f"{where}.{name}: not a {kind} hyperparameter", f"{where}.{name}")
    if req.integrations:
        raise bad_request("integrations: not supported by this platform", "integrations")


def manifest(
    name: str, req: CreateJobRequest, spec: dict[str, Any], hyperparameters: dict[str, Any]
) -> dict[str, Any]:
    """The RLHFJob: the spec, labelled as the gateway's, with the request kept for the
    job object (what the tenant asked, as it asked it)."""
    asked = {
        "model": req.model,
        "training_file": req.training_file,
        "validation_file": req.validation_file,
        "method": req.method_type(),
        "method_params": (req.method.model_dump(exclude_none=True) if req.method else None),
        "hyperparameters": hyperparameters,
        "suffix": req.suffix,
        "seed": req.seed,
    }
    return {
        "apiVersion": "rlhf.dev/v1alpha1",
        "kind": "RLHFJob",
        "metadata": {
            "name": name,
            "labels": {GATEWAY_LABEL: GATEWAY_VALUE},
            "annotations": {
                REQUEST_ANNOTATION: json.dumps(asked, sort_keys=True),
                METADATA_ANNOTATION: json.dumps(req.metadata or {}, sort_keys=True),
            },
        },
        "spec": spec,
    }


def check_manifest(doc: dict[str, Any], plan: Translation, model_id: str) -> None:
    """400 with every problem `rlhf validate` finds, each under the param that set it."""
    loaded = load_document(doc, "request", Path("."))
    if loaded.ok:
        return
    lines: list[str] = []
    first_param: str | None = None
    for problem in loaded.problems:
        path, _, message = problem.partition(": ")
        path = path.removeprefix("spec.")
        param = _param_of(path, plan)
        if param is None:
            lines.append(f"{path} (a default of model {model_id!r}): {message}")
        else:
            lines.append(f"{param}: {message}")
            first_param = first_param or param
    raise ApiError(400, "; ".join(lines), param=first_param, code="invalid_job")


def _param_of(path: str, plan: Translation) -> str | None:
    """The request param behind a spec path (the longest origin that is a prefix of it)."""
    best = None
    for spec_path, param in plan.origin.items():
        if (
            path == spec_path
            or path.startswith(spec_path + ".")
            or path.startswith(spec_path + "[")
        ) and (best is None or len(spec_path) > len(best[0])):
            best = (spec_path, param)
    if best is None:
        return None
    spec_path, param = best
    return param + path[len(spec_path) :] if spec_path in plan.deep else param
