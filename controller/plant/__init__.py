"""The rig's physics (DESIGN.md §1–2): one model for the simulator, the regressors, the
feed-forward and the validation simulation."""
