-- tailord store, version 3: listings filtered by state walk one state's
-- jobs in submission order (GET /v1/jobs?state=...), not every job.

CREATE INDEX jobs_by_state_seq ON jobs (state, seq);
