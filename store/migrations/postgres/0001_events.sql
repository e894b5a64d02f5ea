-- Every event drainscope records, one row each, partitioned by day on ts
-- (UTC unix nanoseconds) so that retention drops whole partitions.
CREATE TABLE events (
    ts            bigint  NOT NULL,
    id            bigint  NOT NULL,
    kind          text    NOT NULL,
    node          text    NOT NULL,
    source        text    NOT NULL,
    namespace     text    NOT NULL DEFAULT '',
    pod           text    NOT NULL DEFAULT '',
    pod_uid       text    NOT NULL DEFAULT '',
    container     text    NOT NULL DEFAULT '',
    workload_kind text    NOT NULL DEFAULT '',
    workload      text    NOT NULL DEFAULT '',
    pid           integer NOT NULL DEFAULT 0,
    comm          text    NOT NULL DEFAULT '',
    peer_pid      integer NOT NULL DEFAULT 0,
    peer_comm     text    NOT NULL DEFAULT '',
    signal        integer NOT NULL DEFAULT 0,
    code          integer NOT NULL DEFAULT 0,
    duration      bigint  NOT NULL DEFAULT 0,
    laddr         inet,
    lport         integer NOT NULL DEFAULT 0,
    raddr         inet,
    rport         integer NOT NULL DEFAULT 0,
    netns         bigint  NOT NULL DEFAULT 0,
    service       text    NOT NULL DEFAULT '',
    slice         text    NOT NULL DEFAULT '',
    reason        text    NOT NULL DEFAULT '',
    flags         integer NOT NULL DEFAULT 0,
    attrs         jsonb,
    PRIMARY KEY (ts, id)
) PARTITION BY RANGE (ts);

-- "Events of these pods in this time window."
CREATE INDEX events_pod_ts ON events (pod_uid, ts);
-- "Rollouts of this workload."
CREATE INDEX events_workload_ts ON events (namespace, workload_kind, workload, ts);
