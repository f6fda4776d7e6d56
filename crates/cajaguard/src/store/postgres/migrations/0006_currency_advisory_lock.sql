-- The gate's currency lock is a transaction advisory lock (key 1667720040, hashtext of the
-- schema and the currency) instead of an upsert of a row here: the same turn-taking, without
-- writing a row version, its WAL and its index entry on every gate.
--
-- The table goes so that a process of an earlier version still running on this store, which
-- would lock the row and not the advisory lock, can no longer gate at all: its gates fail
-- (relation does not exist) and are refused, rather than deciding beside the new ones without
-- waiting for them. Restart every host on this version. The drop waits for the gates of such
-- processes under way, longer than the store's usual lock timeout allows, so that a busy older
-- host does not stop this one from starting.
SET LOCAL lock_timeout = '60s';
SET LOCAL statement_timeout = '70s';
DROP TABLE IF EXISTS currency_locks;
