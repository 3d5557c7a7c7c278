"""Hostile manifest *files*: text no patch of base.yaml can express (YAML bombs, nesting,
duplicate keys, numbers JSON cannot hold, bytes that are not text). Each is refused with
problem lines that contain `expect` (a field path, or the reason when the file as a whole
cannot be read); none may crash a reader."""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from . import base_manifest


@dataclass(frozen=True)
class HostileText:
    id: str
    text: bytes
    expect: str


def _with_spec_line(path: list[str], value: str) -> str:
    """base.yaml as YAML with `value` written verbatim at spec.<path>."""
    doc = base_manifest()
    node = doc["spec"]
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = "@@VALUE@@"
    return yaml.safe_dump(doc, sort_keys=False).replace("'@@VALUE@@'", value)


_BASE = yaml.safe_dump(base_manifest(), sort_keys=False)
_LAUGHS = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 10)
)


def _text(id: str, text: str, expect: str) -> HostileText:
    return HostileText(id, text.encode(), expect)


def hostile_texts() -> list[HostileText]:
    flow_deep = "[" * 5000 + "]" * 5000
    block_deep = "".join("  " * i + "x:\n" for i in range(3000)) + "  " * 3000 + "y: 1\n"
    return [
        _text("flow-nesting-5000", _with_spec_line(["rollout", "stop"], flow_deep), "nest"),
        _text("block-nesting-3000", _BASE + "extra:\n" + block_deep, "nest"),
        _text("nesting-70", _with_spec_line(["env"], "[" * 70 + "]" * 70), "nested deeper than 64"),
        _text("billion-laughs", _LAUGHS + _BASE, "aliases are expanded"),
        _text("recursive-alias", _with_spec_line(["env"], "&loop [*loop]"), "contains it"),
        _text(
            "duplicate-spec-key",
            _BASE.replace("spec:\n", "spec:\n  image: a/b:1\n  image: evil/b:1\n"),
            "duplicate key 'image'",
        ),
        _text("duplicate-top-key", _BASE + "kind: RLHFJob\n", "duplicate key 'kind'"),
        _text(
            "seed-5000-digits",
            _with_spec_line(["training", "seed"], "9" * 5000),
            "spec.training.seed: integer out of range",
        ),
        _text(
            "max-steps-minus-5000-digits",
            _with_spec_line(["training", "maxSteps"], "-" + "9" * 5000),
            "spec.training.maxSteps: integer out of range",
        ),
        _text(
            "weight-infinity",
            _with_spec_line(["models", "rewardFunction", "weight"], ".inf"),
            "spec.models.rewardFunction.weight: must be a finite number",
        ),
        _text(
            "kl-coef-minus-infinity",
            _with_spec_line(["algorithm", "klCoef"], "-.inf"),
            "spec.algorithm.klCoef: must be a finite number",
        ),
        _text(
            "temperature-nan",
            _with_spec_line(["rollout", "temperature"], ".nan"),
            "spec.rollout.temperature: must be a finite number",
        ),
        _text(
            "top-p-overflowing-float",
            _with_spec_line(["rollout", "topP"], "1.0e+400"),
            "spec.rollout.topP: must be a finite number",
        ),
        _text(
            "json-seed-5000-digits",
            '{"apiVersion": "rlhf.dev/v1alpha1", "kind": "RLHFJob", "metadata": {"name": "j"},'
            ' "spec": {"training": {"seed": ' + "1" * 5000 + "}}}",
            "spec.training.seed: integer out of range",
        ),
        _text(
            "python-object-tag",
            _with_spec_line(["image"], '!!python/object/apply:os.system ["id"]'),
            "not valid YAML",
        ),
        HostileText("not-utf8", b"\xff\xfe" + _BASE.encode("utf-16-le"), "not UTF-8"),
        HostileText("over-16-mib", b"# " + b"x" * (16 * 1024 * 1024) + b"\n", "larger than"),
        _text("control-character", _BASE.replace("ppo", "ppo\x07"), "not valid YAML"),
        _text("tab-indentation", _BASE.replace("  algorithm:", "\talgorithm:"), "not valid YAML"),
        _text(
            "name-of-a-megabyte",
            _BASE.replace("name: corpus-base", "name: " + "a" * 1_000_000),
            "metadata.name",
        ),
        _text(
            "namespace-not-a-label",
            _BASE.replace("name: corpus-base", "name: corpus-base\n  namespace: Team_A"),
            "metadata.namespace",
        ),
        _text(
            "unknown-field-of-100-kb",
            _with_spec_line(["rollout", "x" * 100_000], "1"),
            "spec.rollout.",
        ),
        _text("a-list", "- 1\n- 2\n", "<root>: expected a mapping"),
        _text(
            "json-exponent-overflow",
            '{"apiVersion": "rlhf.dev/v1alpha1", "kind": "RLHFJob", "metadata": {"name": "j"},'
            ' "spec": {"rollout": {"topP": 1e999}}}',
            "spec.rollout.topP",
        ),
    ]
