-- tailord store, version 8: preference training. A DPO job's steps carry
-- the metrics TRL reports, under column names without the slash: the mean
-- rewards (beta times the log-ratio against the reference) of the chosen
-- and rejected completions, the share of pairs ranked right, the mean
-- margin, the trained model's mean log-probabilities; and, on an evaluated
-- step, the eval pairs' reward accuracy. NULL for supervised jobs.

ALTER TABLE step_metrics ADD COLUMN rewards_chosen REAL;
ALTER TABLE step_metrics ADD COLUMN rewards_rejected REAL;
ALTER TABLE step_metrics ADD COLUMN rewards_accuracies REAL;
ALTER TABLE step_metrics ADD COLUMN rewards_margins REAL;
ALTER TABLE step_metrics ADD COLUMN logps_chosen REAL;
ALTER TABLE step_metrics ADD COLUMN logps_rejected REAL;
ALTER TABLE step_metrics ADD COLUMN eval_rewards_accuracies REAL;
