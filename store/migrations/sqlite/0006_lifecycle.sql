-- As in the Postgres schema: a partial index of the rows the account of
-- disruptions reads (store.Query.Lifecycle), so that the connections, the
-- bulk of the rows, are neither indexed nor walked. The flags are packed
-- in the detail here: the re-observed states and exec probes' exits are
-- in the index, and SQLite.Scan leaves them out.
CREATE INDEX events_lifecycle ON events (ts)
    WHERE kind NOT IN ('conn_closed', 'rst_sent', 'rst_received', 'conn_refused', 'client_failure');
