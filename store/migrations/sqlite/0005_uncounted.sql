-- Postgres marks which rows its per-second counts hold (its
-- 0005_uncounted.sql); SQLite keeps no such counts (0004), so this version
-- changes nothing here.
SELECT 1;
