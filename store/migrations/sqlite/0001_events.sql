-- Every event drainscope records, one row each; the same columns as the
-- Postgres schema, with addresses as text. ts is UTC unix nanoseconds.
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
    pid           INTEGER NOT NULL DEFAULT 0,
    comm          TEXT    NOT NULL DEFAULT '',
    peer_pid      INTEGER NOT NULL DEFAULT 0,
    peer_comm     TEXT    NOT NULL DEFAULT '',
    signal        INTEGER NOT NULL DEFAULT 0,
    code          INTEGER NOT NULL DEFAULT 0,
    duration      INTEGER NOT NULL DEFAULT 0,
    laddr         TEXT,
    lport         INTEGER NOT NULL DEFAULT 0,
    raddr         TEXT,
    rport         INTEGER NOT NULL DEFAULT 0,
    netns         INTEGER NOT NULL DEFAULT 0,
    service       TEXT    NOT NULL DEFAULT '',
    slice         TEXT    NOT NULL DEFAULT '',
    reason        TEXT    NOT NULL DEFAULT '',
    flags         INTEGER NOT NULL DEFAULT 0,
    attrs         TEXT,
    PRIMARY KEY (ts, id)
) WITHOUT ROWID;

CREATE INDEX events_pod_ts ON events (pod_uid, ts);
CREATE INDEX events_workload_ts ON events (namespace, workload_kind, workload, ts);
