-- tailord store, version 10: reward models (training.method reward). Their
-- steps carry the metrics TRL's RewardTrainer reports, under column names
-- without the slash: the share of pairs scored right, the mean margin of
-- the chosen score over the rejected, the lowest, mean and highest score;
-- and, on an evaluated step, the eval pairs' accuracy. NULL for other jobs.

ALTER TABLE step_metrics ADD COLUMN accuracy REAL;
ALTER TABLE step_metrics ADD COLUMN margin REAL;
ALTER TABLE step_metrics ADD COLUMN min_reward REAL;
ALTER TABLE step_metrics ADD COLUMN mean_reward REAL;
ALTER TABLE step_metrics ADD COLUMN max_reward REAL;
ALTER TABLE step_metrics ADD COLUMN eval_accuracy REAL;
