-- Which rows event_seconds (0004) counts: those with counted true, which
-- Append's COPY of a whole batch writes in the transaction that adds them
-- to their seconds. Rows written any other way are not counted there: a
-- retried batch's (ON CONFLICT DO NOTHING cannot tell a role that may not
-- read events what it skipped), and a writer's of an older version still
-- running after the upgrade (its COPY leaves counted to the default,
-- false). CountEvents adds those up through events_uncounted, an index of
-- them alone.
--
-- Every row stored so far is counted here, after the ALTERs: their lock
-- holds writers off until this transaction commits, so no row slips in
-- between the column and the counts.
ALTER TABLE events ADD COLUMN counted boolean NOT NULL DEFAULT true;
ALTER TABLE events ALTER COLUMN counted SET DEFAULT false;
CREATE INDEX events_uncounted ON events (ts) WHERE NOT counted;
-- The template of a retried batch's temporary table (roles.go) follows.
ALTER TABLE IF EXISTS events_shape ADD COLUMN IF NOT EXISTS counted boolean NOT NULL DEFAULT false;

DELETE FROM event_seconds;
INSERT INTO event_seconds (sec, n) SELECT ts / 1000000000, count(*) FROM events GROUP BY 1;
