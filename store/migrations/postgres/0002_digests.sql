-- What a reader computed from one window of events (a rollout's timeline
-- and analysis), kept so that the next reader, in another process, need not
-- read and analyse the window again. A digest holds while the window holds
-- the number of events it was computed from; pruning deletes the digests of
-- the windows it cuts into.
CREATE TABLE digests (
    key       text    PRIMARY KEY,
    from_ns   bigint  NOT NULL,
    to_ns     bigint  NOT NULL,
    events    bigint  NOT NULL,
    built_ns  bigint  NOT NULL,
    timeline  bytea   NOT NULL,
    analysis  bytea   NOT NULL
);
CREATE INDEX digests_from ON digests (from_ns);

-- A digest is read whole and is mostly packed numbers: keep it out of line
-- but uncompressed, so a read is no decompression of megabytes.
ALTER TABLE digests ALTER COLUMN timeline SET STORAGE EXTERNAL;
ALTER TABLE digests ALTER COLUMN analysis SET STORAGE EXTERNAL;
