-- The account of disruptions (analysis.FindDisruptions: the web UI's list,
-- the export feed) reads the lifecycle of a window: the pods' transitions,
-- their main processes' signals and exits, the workload changes and the
-- nodes' capabilities (store.Query.Lifecycle), in time order. A partial
-- index of those rows alone: the connections that are the bulk of the
-- rows, the watcher's periodic re-observations (flag 16; but a pod's
-- deletion or finish found at a list, and its running containers, which
-- say which is the app) and the exits of processes other than their
-- container's main one (flag 32: exec probes, every few seconds in every
-- pod that has one) do not enter it, so the read does not walk them, and
-- writing them costs nothing more. The predicate is
-- store.Query.Lifecycle's, term for term.
CREATE INDEX events_lifecycle ON events (ts)
    WHERE kind NOT IN ('conn_closed', 'rst_sent', 'rst_received', 'conn_refused', 'client_failure')
    AND ((flags & 16) = 0 OR kind IN ('pod_deletion', 'pod_finished', 'container_started'))
    AND (kind NOT IN ('process_exit') OR (flags & 32) <> 0);
