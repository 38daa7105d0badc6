-- A key's status is one of two values, kept by its type rather than by a
-- CHECK: PostgreSQL reads a CHECK's expression from its stored form and
-- prepares it again in every statement that writes the table, which is
-- every claim and every save, where an enum's input checks the value
-- once, when the statement is planned.
--
-- The two partial indexes (started keys by lock time for the sweeper,
-- done keys by creation time for the prune) become one index of every key
-- by status and creation time, which serves both (locked_at equals
-- created_at in every row, see 007): each write of a key opened and
-- checked the predicates of both, and now opens one index with none.
-- A save still moves the key from one part of the index to the other.
CREATE TYPE key_status AS ENUM ('started', 'done');
DROP INDEX IF EXISTS idempotency_keys_started;
DROP INDEX IF EXISTS idempotency_keys_done_created;
ALTER TABLE idempotency_keys
  DROP CONSTRAINT IF EXISTS idempotency_keys_status_check,
  ALTER COLUMN status TYPE key_status USING status::key_status;
CREATE INDEX idempotency_keys_status_created ON idempotency_keys (status, created_at);
