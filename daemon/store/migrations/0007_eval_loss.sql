-- tailord store, version 7: evaluation. A step after which the runner
-- evaluated the model on data.eval (training.eval_every, and the last step)
-- carries the mean loss over the eval set's trained tokens, how many
-- tokens that was and how long it took; NULL on the other steps. A job
-- keeps its newest evaluation for its status.

ALTER TABLE step_metrics ADD COLUMN eval_loss REAL;
ALTER TABLE step_metrics ADD COLUMN eval_tokens INTEGER;
ALTER TABLE step_metrics ADD COLUMN eval_seconds REAL;
ALTER TABLE jobs ADD COLUMN last_eval_step INTEGER;
ALTER TABLE jobs ADD COLUMN last_eval_loss REAL;
