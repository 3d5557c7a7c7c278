"""Ray actors of the model roles: `actor.ActorWorker`, `critic.CriticWorker`,
`frozen.ReferenceWorker`, `frozen.RewardModelWorker`; the offline trainers'
`offline.OfflineTrainRank` and `offline_frozen` (reference, teacher); the iterative trainers'
`iterative.IterativeActor`; `base` and `trained` hold what they share. Their losses come from
`rlhf_trainer.objectives`, the layer below them."""
