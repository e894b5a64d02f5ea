-- How many events each second holds (sec: ts / 1e9), kept by Append in the
-- transaction that writes them, so that counting a window's events
-- (CountEvents, which says whether a digest still holds) sums one row per
-- second and counts only the two partial seconds at its ends: its cost
-- grows with the window's length, not with the cluster's event rate.
-- exact is false for a second whose count no longer holds (retention cut
-- into it): such a second is counted from its rows. Which rows the counts
-- hold is 0005's counted, and 0005 counts what is stored.
CREATE TABLE event_seconds (
    sec   bigint  PRIMARY KEY,
    n     bigint  NOT NULL,
    exact boolean NOT NULL DEFAULT true
);
