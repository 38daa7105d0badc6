-- Which server claimed a started key, and when in real (database) time.
-- A server's sweeper judges its own keys by its demo clock, since it
-- knows which of them are still running; another server's keys only by
-- how long they have really been held, whatever any demo clock says, so
-- it never closes a key a live request on that server still holds.
ALTER TABLE idempotency_keys ADD COLUMN claimed_by text NOT NULL DEFAULT '';
ALTER TABLE idempotency_keys ADD COLUMN claimed_at timestamptz NOT NULL DEFAULT now();
