-- Every key row is inserted with locked_at equal to created_at, and
-- neither changes afterwards, so the newest keys are found through the
-- two partial indexes the sweeper and the prune need already (started
-- keys by locked_at, done keys by created_at): an index of every key by
-- locked_at cost each payment two more index entries (its claim and its
-- completion), and served only the live pages' first load.
DROP INDEX IF EXISTS idempotency_keys_locked;
