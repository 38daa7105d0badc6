-- The index of charges by time comes back (009 dropped it). The live
-- pages' model reads the newest charges each time it loads, and with
-- several servers on one database under load each server's model loads
-- far more often than at its start and after the odd gap: bench/relay.sh
-- counted 115 loads over two rounds of three servers. Without the index
-- every load sorted the whole table, about 30 ms of PostgreSQL's time
-- at that table's size and more as it grew, and the servers with the
-- relay made 0.79× the payments of those without (0.89 in the first
-- round, 0.69 in the sixth) where they had made 0.91×.
CREATE INDEX IF NOT EXISTS charges_created ON charges (created_at);
