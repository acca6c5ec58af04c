-- tailord store, version 1: jobs, their events, step metrics and
-- idempotency keys. Times are Unix seconds (REAL); sizes are bytes.

CREATE TABLE jobs (
  id                 TEXT PRIMARY KEY,
  seq                INTEGER NOT NULL UNIQUE,          -- submission order
  name               TEXT NOT NULL,
  state              TEXT NOT NULL CHECK (state IN
                       ('queued', 'planning', 'running', 'succeeded', 'failed', 'cancelled')),
  priority           INTEGER NOT NULL DEFAULT 0,       -- higher first
  spec_text          TEXT NOT NULL,                    -- the submitted document, as sent
  spec_json          TEXT NOT NULL,                    -- the resolved spec (plan document's spec)
  labels_json        TEXT NOT NULL DEFAULT '{}',
  plan_json          TEXT,                             -- the current plan document
  estimated_bytes    INTEGER NOT NULL DEFAULT 0,       -- plan's per-device total
  gpus_needed        INTEGER NOT NULL DEFAULT 0,       -- 0: runs on the host budget
  memory_limit_bytes INTEGER,                          -- runner --memory-limit override
  retries            INTEGER NOT NULL DEFAULT 0,       -- allowed retries after failures
  attempts           INTEGER NOT NULL DEFAULT 0,       -- runner launches so far
  failures           INTEGER NOT NULL DEFAULT 0,       -- retryable failures so far
  oom_restarts       INTEGER NOT NULL DEFAULT 0,
  next_attempt_at    REAL,                             -- backoff: not before this time
  cancel_requested   INTEGER NOT NULL DEFAULT 0,
  cancel_sent_at     REAL,                             -- SIGTERM sent
  pid                INTEGER,                          -- runner process (group leader)
  pid_start_ticks    INTEGER,                          -- /proc/PID/stat starttime: guards pid reuse
  assigned_gpus      TEXT,                             -- "0,1"
  metrics_offset     INTEGER NOT NULL DEFAULT 0,       -- bytes of metrics.jsonl ingested
  events_offset      INTEGER NOT NULL DEFAULT 0,       -- bytes of events.jsonl ingested
  last_step          INTEGER,
  peak_bytes         INTEGER,                          -- highest measured peak
  exit_code          INTEGER,
  exit_signal        INTEGER,
  exit_reason        TEXT,
  created_at         REAL NOT NULL,
  updated_at         REAL NOT NULL,
  started_at         REAL,
  finished_at        REAL
);
CREATE INDEX jobs_by_state ON jobs (state, priority DESC, seq);

CREATE TABLE job_labels (
  job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  key    TEXT NOT NULL,
  value  TEXT NOT NULL,
  PRIMARY KEY (job_id, key)
);
CREATE INDEX job_labels_by_value ON job_labels (key, value);

-- Every state transition and everything the runner reported.
CREATE TABLE events (
  id         INTEGER PRIMARY KEY,
  job_id     TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  time       REAL NOT NULL,
  kind       TEXT NOT NULL,       -- "state", "runner.oom", "replan", "retry", ...
  from_state TEXT,
  to_state   TEXT,
  message    TEXT NOT NULL DEFAULT '',
  data_json  TEXT                 -- the runner's event object, or details
);
CREATE INDEX events_by_job ON events (job_id, id);

-- One row per optimizer step and rank; a resumed run overwrites the steps
-- it repeats.
CREATE TABLE step_metrics (
  job_id                 TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  rank                   INTEGER NOT NULL,
  step                   INTEGER NOT NULL,
  attempt                INTEGER NOT NULL,
  time                   REAL NOT NULL,
  loss                   REAL,
  lr                     REAL,
  grad_norm              REAL,
  tokens                 INTEGER,
  tokens_per_second      REAL,
  step_seconds           REAL,
  allocated_bytes        INTEGER,
  peak_bytes             INTEGER,
  weights_bytes          INTEGER,
  gradients_bytes        INTEGER,
  optimizer_states_bytes INTEGER,
  master_weights_bytes   INTEGER,
  adapter_bytes          INTEGER,
  activations_bytes      INTEGER,
  logits_bytes           INTEGER,
  overhead_bytes         INTEGER,
  PRIMARY KEY (job_id, rank, step)
);

CREATE TABLE idempotency_keys (
  key          TEXT PRIMARY KEY,
  request_hash TEXT NOT NULL,     -- the same key with another body is refused
  job_id       TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  created_at   REAL NOT NULL
);
