"""Pure decisions: one reconcile pass as a value (status, children, deletions, events, when to
look again), computed from the job and what was observed. No I/O, no kopf."""
