-- The servers' one order of relayed batches (NotifyNumbered): one counter
-- row, which every batch's transaction updates before it sends its
-- notifications, so that batches commit, and reach every listener, in the
-- order of their numbers; and the newest batches themselves, which a
-- server that lost its listening connection reads back.
CREATE TABLE IF NOT EXISTS relay_order (
  id int PRIMARY KEY CHECK (id = 1),
  n  bigint NOT NULL
);
INSERT INTO relay_order (id, n) VALUES (1, 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS relay_batches (
  n        bigint PRIMARY KEY,
  payloads text[] NOT NULL
);
