"""Ray actors of the model roles: `actor.ActorWorker`, `critic.CriticWorker`,
`frozen.ReferenceWorker`, `frozen.RewardModelWorker`; `base` holds what they share."""
