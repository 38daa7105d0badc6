-- What a look-up of an order reads. The keys claimed for an order are
-- found by (scope, order_id), so that a shop asking about an order after
-- a time-out hears "pending" while a key for it is started, and why an
-- attempt ended without a charge.
CREATE INDEX IF NOT EXISTS idempotency_keys_scope_order ON idempotency_keys (scope, order_id);

-- A released claim deletes its key row, so that a retry with the same key
-- runs afresh. The release leaves this trace, so that the order's look-up
-- can say "not charged: released" rather than "never seen". One row per
-- key: a key released again replaces its trace. Pruned with the done keys.
CREATE TABLE IF NOT EXISTS released_keys (
  scope       text COLLATE "C" NOT NULL,
  key         text COLLATE "C" NOT NULL,
  order_id    text COLLATE "C" NOT NULL,
  cause       text NOT NULL CHECK (cause IN ('interrupted', 'sweeper')),
  released_at timestamptz NOT NULL,
  PRIMARY KEY (scope, key)
);

CREATE INDEX IF NOT EXISTS released_keys_scope_order ON released_keys (scope, order_id);
CREATE INDEX IF NOT EXISTS released_keys_released_at ON released_keys (released_at);
