-- Fencing tokens. Every claim writes a token of its own into its key row,
-- and completing, releasing and sweeping the key name that token: a
-- request whose claim was closed or released meanwhile can no longer
-- touch a row that is now someone else's. Rows written before this
-- migration carry the empty token, which the sweeper still names.
ALTER TABLE idempotency_keys ADD COLUMN claim TEXT NOT NULL DEFAULT '';

-- The key the charge is recorded under and the gateway is called with.
-- Empty means the idempotency key itself (the real protocol); the lab's
-- "key table only" mode uses a reference of each request's own, so the
-- sweeper must ask the gateway about that reference instead.
ALTER TABLE idempotency_keys ADD COLUMN charge_key TEXT NOT NULL DEFAULT '';
