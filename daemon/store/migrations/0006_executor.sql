-- tailord store, version 6: where a job runs. `executor` is "local" (a
-- tailor-runner process of tailord's machine) or "slurm"; for Slurm,
-- `executor_job_id` is the batch job of the current attempt and
-- `executor_state` what Slurm last said of it ("PENDING (Priority)",
-- "RUNNING on n[1-2]", "COMPLETED"), or why it could not be asked.
-- Reconciliation finds a Slurm job by its comment (the Tailor job id), not
-- by this id: Slurm reuses ids after a controller crash.

ALTER TABLE jobs ADD COLUMN executor TEXT NOT NULL DEFAULT 'local';
ALTER TABLE jobs ADD COLUMN executor_job_id TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN executor_state TEXT NOT NULL DEFAULT '';
