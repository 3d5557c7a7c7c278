"""Which algorithm runs, and its hyper-parameters, with the papers' / OpenRLHF's defaults."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from .base import ConfigModel
from .objective import DEFAULT_CLIPS, PolicyLoss, RolloutCorrectionConfig
from .steps import StepTokens


class AlgorithmName(StrEnum):
    # Online (rollout -> reward -> policy update) algorithms.
    PPO = "ppo"
    GRPO = "grpo"
    DR_GRPO = "dr-grpo"
    REINFORCE_PP = "reinforce++"
    REINFORCE_PP_BASELINE = "reinforce++-baseline"
    RLOO = "rloo"
    # The student samples, a frozen teacher scores its tokens: per-token reward
    # -(logp_student - logp_teacher), the negative reverse KL (Thinking Machines, 2025).
    ON_POLICY_DISTILLATION = "on-policy-distillation"
    # Iterative (rounds of generate -> score -> select -> train with an offline objective).
    REJECTION_SAMPLING = "rejection-sampling"
    ITERATIVE_DPO = "iterative-dpo"
    # Offline trainers (a fixed data set, no rollouts).
    SFT = "sft"
    REWARD_MODEL = "reward-model"
    DPO = "dpo"
    IPO = "ipo"
    CDPO = "cdpo"
    KTO = "kto"
    CONDITIONAL_SFT = "conditional-sft"
    DISTILLATION = "distillation"
    PRM = "prm"

    @property
    def is_online(self) -> bool:
        return self in ONLINE_ALGORITHMS

    @property
    def is_iterative(self) -> bool:
        """Online algorithms that train on a data set selected from each round's samples."""
        return self in ITERATIVE_ALGORITHMS

    @property
    def needs_critic(self) -> bool:
        """Only PPO learns a value function (GAE); the others use sampled baselines."""
        return self is AlgorithmName.PPO

    @property
    def is_group_estimator(self) -> bool:
        """Estimators whose baseline is computed over several samples of the same prompt."""
        return self in GROUP_ALGORITHMS

    @property
    def needs_teacher(self) -> bool:
        return self in TEACHER_ALGORITHMS

    @property
    def needs_reward_source(self) -> bool:
        """Online algorithms learn from rewards, except on-policy distillation, whose
        per-token reward is the teacher's."""
        return self.is_online and self is not AlgorithmName.ON_POLICY_DISTILLATION

    @property
    def needs_reference(self) -> bool:
        return self not in NO_REFERENCE_ALGORITHMS

    @property
    def uses_preference_pairs(self) -> bool:
        return self in {
            AlgorithmName.DPO,
            AlgorithmName.IPO,
            AlgorithmName.CDPO,
            AlgorithmName.REWARD_MODEL,
        }


ONLINE_ALGORITHMS = frozenset(
    {
        AlgorithmName.PPO,
        AlgorithmName.GRPO,
        AlgorithmName.DR_GRPO,
        AlgorithmName.REINFORCE_PP,
        AlgorithmName.REINFORCE_PP_BASELINE,
        AlgorithmName.RLOO,
        AlgorithmName.ON_POLICY_DISTILLATION,
        AlgorithmName.REJECTION_SAMPLING,
        AlgorithmName.ITERATIVE_DPO,
    }
)
ITERATIVE_ALGORITHMS = frozenset({AlgorithmName.REJECTION_SAMPLING, AlgorithmName.ITERATIVE_DPO})
# Trainers that compare with no frozen reference policy (rejection sampling fine-tunes on its
# selected samples; the distillations' frozen model is their teacher, a role of its own).
NO_REFERENCE_ALGORITHMS = frozenset(
    {
        AlgorithmName.SFT,
        AlgorithmName.REWARD_MODEL,
        AlgorithmName.REJECTION_SAMPLING,
        AlgorithmName.CONDITIONAL_SFT,
        AlgorithmName.DISTILLATION,
        AlgorithmName.ON_POLICY_DISTILLATION,
        AlgorithmName.PRM,
    }
)
# Trainers that learn from a frozen teacher (`models.teacher`, placed on its own ranks).
TEACHER_ALGORITHMS = frozenset({AlgorithmName.DISTILLATION, AlgorithmName.ON_POLICY_DISTILLATION})
GROUP_ALGORITHMS = frozenset(
    {
        AlgorithmName.GRPO,
        AlgorithmName.DR_GRPO,
        AlgorithmName.REINFORCE_PP_BASELINE,
        AlgorithmName.RLOO,
    }
)


class KLEstimator(StrEnum):
    """Schulman's estimators of KL(pi || ref) from samples of pi: k1 = log r, k2, k3."""

    K1 = "k1"
    K2 = "k2"
    K3 = "k3"


class LossAggregation(StrEnum):
    TOKEN_MEAN = "token-mean"
    SEQ_MEAN_TOKEN_MEAN = "seq-mean-token-mean"
    SEQ_MEAN_TOKEN_SUM = "seq-mean-token-sum"
    # Dr. GRPO: token sums divided by a constant (the generation budget), not by length.
    SEQ_MEAN_TOKEN_SUM_NORM = "seq-mean-token-sum-norm"


class DistillLoss(StrEnum):
    """Distillation's divergence between the teacher's and the student's token distributions."""

    # KL(teacher || student): mean-seeking, the student covers all the teacher's modes.
    FORWARD_KL = "forward-kl"
    # KL(student || teacher): mode-seeking (MiniLLM, Gu et al. 2024).
    REVERSE_KL = "reverse-kl"
    # (1 - distillMix) x forward + distillMix x reverse.
    MIXED = "mixed"


class AlgorithmConfig(ConfigModel):
    """`spec.algorithm`: the algorithm and the knobs of its objective."""

    name: AlgorithmName = Field(description="Which trainer runs.")

    # --- policy objective (PPO clip, Schulman et al. 2017; dual clip, Ye et al. 2020;
    # GSPO, Zheng et al. 2025; CISPO, MiniMax 2025) ---
    policy_loss: PolicyLoss = Field(
        PolicyLoss.PPO,
        description="ppo: PPO's per-token clipped surrogate; gspo: one length-normalised ratio "
        "per sequence, clipped per sequence (Qwen3's GSPO); cispo: the clipped, detached token "
        "ratio weights each token's log-prob (MiniMax-M1), so no token loses its gradient.",
    )
    clip_low: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="Ratio clip below 1 (eps_low). Default per policyLoss: ppo 0.2, gspo 3e-4 "
        "(GSPO's paper), cispo none (no lower bound, as MiniMax-M1).",
    )
    clip_high: float | None = Field(
        None,
        gt=0,
        lt=10,
        description="Ratio clip above 1 (eps_high; DAPO's clip-higher). Default per policyLoss: "
        "ppo 0.2, gspo 4e-4 (GSPO's paper), cispo 0.2 (verl's recipe).",
    )
    dual_clip: float | None = Field(
        None, gt=1, description="Dual-clip constant c > 1 for negative advantages; off when unset."
    )
    loss_aggregation: LossAggregation = Field(
        LossAggregation.TOKEN_MEAN, description="How per-token losses are averaged."
    )
    entropy_coef: float = Field(0.0, ge=0, description="Entropy bonus coefficient.")
    rollout_correction: RolloutCorrectionConfig | None = Field(
        None,
        description="Correct for sampling with the engine (vLLM: its own kernels and precision, "
        "older weights under rollout.async / partialRollout) instead of the trainer: truncated "
        "(tis) or masked (mis, icepop) importance weights on the engine's log-probs, with the "
        "mismatch reported (rollout/mismatch_kl, rollout/rho_*, rollout/masked_fraction). Off "
        "when unset.",
    )
    ptx_coef: float = Field(
        0.0,
        ge=0,
        description="PPO-ptx (InstructGPT): weight of the language-modelling loss on "
        "data.pretrain batches added to the actor's loss; 0 disables it.",
    )

    # --- KL regularisation towards the reference policy ---
    kl_coef: float = Field(
        0.01, ge=0, description="Initial KL coefficient (OpenRLHF init_kl_coef); 0 disables KL."
    )
    kl_estimator: KLEstimator = Field(KLEstimator.K1, description="KL estimator k1 | k2 | k3.")
    use_kl_loss: bool = Field(
        False,
        description="Put KL in the loss (GRPO style) instead of in the token rewards (PPO style).",
    )
    kl_target: float | None = Field(
        None, gt=0, description="Target KL for the adaptive controller (Ziegler et al. 2019)."
    )
    kl_horizon: int = Field(10000, gt=0, description="Adaptive KL controller horizon.")

    # --- advantages and values (GAE, Schulman et al. 2016) ---
    gamma: float = Field(1.0, ge=0, le=1, description="Discount factor.")
    lambd: float = Field(0.95, ge=0, le=1, alias="lambda", description="GAE lambda.")
    value_clip: float | None = Field(
        0.2, gt=0, description="Clip range for value updates (PPO value clipping); unset disables."
    )
    whiten_advantages: bool = Field(
        True, description="Normalise advantages over the whole (global) batch."
    )

    # --- rewards ---
    normalize_reward: bool = Field(False, description="Running mean/std reward normalisation.")
    reward_clip: float | None = Field(
        10.0, gt=0, description="Clip scores to [-rewardClip, rewardClip]; unset disables."
    )
    overlong_buffer: int | None = Field(
        None, gt=0, description="DAPO overlong penalty: tokens before the limit where it starts."
    )
    overlong_penalty: float = Field(1.0, ge=0, description="DAPO overlong penalty factor.")

    # --- DAPO dynamic sampling (Yu et al. 2025), group estimators only ---
    dynamic_sampling: bool = Field(
        False,
        description="Drop prompt groups whose rewards are all equal (no learning signal for a "
        "group estimator) and generate more prompts until the step's batch is full (with "
        "rollout.async, in the background producer: it hands over full batches).",
    )
    dynamic_sampling_max_rounds: int = Field(
        10,
        ge=1,
        le=1000,
        description="Generation rounds per step at most, the first included (DAPO's "
        "max_num_gen_batches); when reached, the batch is filled up with dropped groups.",
    )

    # --- preference objectives (DPO: Rafailov 2023; IPO: Azar 2023; KTO: Ethayarajh 2024) ---
    beta: float = Field(0.1, gt=0, description="DPO/IPO/KTO temperature beta.")
    label_smoothing: float = Field(
        0.0, ge=0, lt=0.5, description="Conservative DPO (cdpo) label noise epsilon."
    )
    desirable_weight: float = Field(1.0, gt=0, description="KTO weight of desirable examples.")
    undesirable_weight: float = Field(1.0, gt=0, description="KTO weight of undesirable examples.")
    margin: float | None = Field(None, description="Reward-model pairwise loss margin.")

    # --- iterative algorithms (rejection sampling / best-of-n, iterative DPO) ---
    iterations: int | None = Field(
        None,
        gt=0,
        description="Rounds of generate -> score -> select -> train (rejection-sampling, "
        "iterative-dpo; one step each, on rolloutBatchSize prompts x rollout.samplesPerPrompt "
        "samples). Default: what the prompts allow (prompts x numEpisodes / rolloutBatchSize); "
        "training.maxSteps, when set, wins. Each round trains training.epochs passes over its "
        "selected set.",
    )
    reward_threshold: float | None = Field(
        None,
        description="rejection-sampling: keep every sample whose reward is at least this "
        "(none, some or all of a prompt's) instead of the best sample of each prompt.",
    )
    refresh_reference: bool = Field(
        False,
        description="iterative-dpo: the DPO reference is the policy at the start of each "
        "round (no reference model is placed) instead of the fixed models.reference.",
    )

    # --- knowledge distillation (Hinton et al. 2015; token-level, as OpenRLHF's KD trainer) ---
    distill_loss: DistillLoss = Field(
        DistillLoss.FORWARD_KL, description="forward-kl | reverse-kl | mixed (distillation)."
    )
    distill_mix: float = Field(
        0.5, ge=0, le=1, description="distillLoss mixed: the weight of the reverse KL."
    )
    distill_sft_coef: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Weight of the NLL of the data's responses beside the KL (OpenRLHF kd_coef "
        "is 1 minus it); 0: learn from the teacher's distributions only.",
    )

    # --- process reward model training (algorithm prm) ---
    prm: StepTokens = Field(
        default_factory=StepTokens, description="prm: the step separator and the label tokens."
    )

    def clip_range(self) -> tuple[float | None, float]:
        """(eps_low, eps_high) in effect: the ones set, else policyLoss's defaults (eps_low
        None: no lower bound, cispo only)."""
        low, high = DEFAULT_CLIPS[self.policy_loss]
        return (
            low if self.clip_low is None else self.clip_low,
            high if self.clip_high is None else self.clip_high,
        )
