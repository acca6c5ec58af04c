-- tailord store, version 12: model FLOPs utilisation. A run on a GPU the
-- catalog knows reports `mfu` on each step (the model FLOPs of its tokens
-- per second over the GPUs' dense peak; docs/training.md). NULL elsewhere
-- (the CPU, an unknown GPU, runs from before).

ALTER TABLE step_metrics ADD COLUMN mfu REAL;
