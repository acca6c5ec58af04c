-- tailord store, version 4: a listing's plan is the plan document's verdict
-- and strategy only (schema_version, fits, summary, strategy, memory,
-- throughput; about 1 kB of the document's 5-10). It is kept beside the
-- document, written by a trigger whenever the document is, so that a page
-- of jobs neither reads the documents nor parses them. A member the
-- document lacks is left out (json_patch drops nulls); a document that is
-- not JSON has the summary null.

ALTER TABLE jobs ADD COLUMN plan_summary_json TEXT NOT NULL DEFAULT 'null';

CREATE TRIGGER jobs_plan_summary AFTER UPDATE OF plan_json ON jobs
BEGIN
  UPDATE jobs SET plan_summary_json = CASE WHEN json_valid(NEW.plan_json) THEN json_patch('{}', json_object(
      'schema_version', NEW.plan_json -> '$.schema_version', 'fits', NEW.plan_json -> '$.fits',
      'summary', NEW.plan_json -> '$.summary', 'strategy', NEW.plan_json -> '$.strategy',
      'memory', NEW.plan_json -> '$.memory', 'throughput', NEW.plan_json -> '$.throughput')) ELSE 'null' END
  WHERE rowid = NEW.rowid;
END;

-- A new job, and every job already stored, go through the same trigger.
CREATE TRIGGER jobs_plan_summary_on_insert AFTER INSERT ON jobs
BEGIN
  UPDATE jobs SET plan_json = plan_json WHERE rowid = NEW.rowid;
END;

UPDATE jobs SET plan_json = plan_json;
