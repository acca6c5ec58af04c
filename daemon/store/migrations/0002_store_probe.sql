-- tailord store, version 2: one row that /healthz rewrites while writes
-- fail, to learn when the store can be written again (the lock was
-- released, space came back).

CREATE TABLE store_probe (
  id        INTEGER PRIMARY KEY CHECK (id = 1),
  probed_at REAL NOT NULL
);
