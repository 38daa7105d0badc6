-- The generation of the servers' order of relayed batches (NotifyNumbered).
-- The counter commits without waiting for the disk, so a crash may forget
-- the newest batches and number the next ones again. relay_life is
-- unlogged: PostgreSQL empties it in its recovery from a crash (and only
-- then), and the first batch numbered after starts a new generation, kept
-- in it, greater than any before (relay_order.gen is the last one used).
CREATE UNLOGGED TABLE IF NOT EXISTS relay_life (
  id  int PRIMARY KEY CHECK (id = 1),
  gen bigint NOT NULL
);
ALTER TABLE relay_order ADD COLUMN IF NOT EXISTS gen bigint NOT NULL DEFAULT 0;
ALTER TABLE relay_batches ADD COLUMN IF NOT EXISTS gen bigint NOT NULL DEFAULT 0;
