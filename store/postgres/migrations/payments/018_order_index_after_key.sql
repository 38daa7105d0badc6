-- The indexes of orders lead with the order, not the scope. Led by the
-- scope, each was also an index of the scope alone, and a statement
-- prepared while its table was small (a new database that autovacuum has
-- not analyzed yet) could be planned to find a key through it: the scope
-- as the index's condition and the key as a filter, reading every key of
-- the scope for each payment, which slowed a new database's payments as
-- it filled (to a half at 16,000 keys). Led by the order, these indexes
-- serve only look-ups that name an order, and a key's look-up takes its
-- primary key, whatever the planner knows of the table's size.
DROP INDEX IF EXISTS idempotency_keys_scope_order;
CREATE INDEX IF NOT EXISTS idempotency_keys_order_scope ON idempotency_keys (order_id, scope);
DROP INDEX IF EXISTS released_keys_scope_order;
CREATE INDEX IF NOT EXISTS released_keys_order_scope ON released_keys (order_id, scope);
DROP INDEX IF EXISTS charges_scope_order;
CREATE INDEX IF NOT EXISTS charges_order_scope ON charges (order_id, scope);
