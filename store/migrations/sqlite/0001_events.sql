-- Every event drainscope records, one row each. ts is UTC unix nanoseconds.
-- The columns queries filter on are real columns, as in the Postgres schema;
-- the rest of the event is packed into detail (see store/sqlite_detail.go),
-- which halves the values bound per row, the dominant cost of embedded ingest.
CREATE TABLE events (
    ts            INTEGER NOT NULL,
    id            INTEGER NOT NULL,
    kind          TEXT    NOT NULL,
    node          TEXT    NOT NULL,
    source        TEXT    NOT NULL,
    namespace     TEXT    NOT NULL DEFAULT '',
    pod           TEXT    NOT NULL DEFAULT '',
    pod_uid       TEXT    NOT NULL DEFAULT '',
    container     TEXT    NOT NULL DEFAULT '',
    workload_kind TEXT    NOT NULL DEFAULT '',
    workload      TEXT    NOT NULL DEFAULT '',
    signal        INTEGER NOT NULL DEFAULT 0,
    detail        BLOB    NOT NULL,
    PRIMARY KEY (ts, id)
) WITHOUT ROWID;

CREATE INDEX events_pod_ts ON events (pod_uid, ts);
CREATE INDEX events_workload_ts ON events (namespace, workload_kind, workload, ts);
