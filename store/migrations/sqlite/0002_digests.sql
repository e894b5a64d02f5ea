-- What a reader computed from one window of events (a rollout's timeline
-- and analysis), kept so that the next reader, in another process, need not
-- read and analyse the window again. A digest holds while the window holds
-- the number of events it was computed from; pruning deletes the digests of
-- the windows it cuts into.
CREATE TABLE digests (
    key       TEXT    PRIMARY KEY,
    from_ns   INTEGER NOT NULL,
    to_ns     INTEGER NOT NULL,
    events    INTEGER NOT NULL,
    built_ns  INTEGER NOT NULL,
    timeline  BLOB    NOT NULL,
    analysis  BLOB    NOT NULL
);
CREATE INDEX digests_from ON digests (from_ns);

-- Counting a window's events (to check a digest) through the table itself
-- reads every row of the window; this index is a tenth of its size.
CREATE INDEX events_ts ON events (ts);
