-- tailord store, version 11: KTO (training.method kto). Its steps carry,
-- beside DPO's rewards and log-probabilities, the KL estimate TRL's
-- KTOTrainer reports as `kl` (the mean over the step's micro-batches of
-- max(0, the mean log-ratio of mismatched prompt and completion rows)); and,
-- on an evaluated step, the eval pairs' estimate. NULL for other jobs.

ALTER TABLE step_metrics ADD COLUMN kl REAL;
ALTER TABLE step_metrics ADD COLUMN eval_kl REAL;
