-- tailord store, version 9: deletions recorded before their folders go.
-- DELETE /v1/jobs/ID removes the job's rows and adds its id here in one
-- transaction, then removes DATA/jobs/ID and the row here. A tailord that
-- died in between finds the id at its next start and removes the folder
-- then, so no folder is left that no job record reaches.

CREATE TABLE deleted_jobs (
  id TEXT PRIMARY KEY,
  deleted_at REAL NOT NULL
);
