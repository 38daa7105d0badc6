-- The common-mistakes lab (web/lab_naive.go), "check first, then insert".
--
-- These two tables are the lab's deliberately unguarded copy of the key
-- and charge tables: no primary key, no UNIQUE, so nothing in the database
-- stops a second row for the same (scope, key). Only that lab mode reads
-- or writes them; the real protocol never does, and a reset empties them.
CREATE TABLE lab_loose_keys (
  scope           TEXT    NOT NULL,
  key             TEXT    NOT NULL,
  fingerprint     TEXT    NOT NULL,
  order_id        TEXT    NOT NULL,
  amount_satang   INTEGER NOT NULL,
  status          TEXT    NOT NULL, -- 'started' | 'done'
  response_status INTEGER,
  response_body   TEXT,
  request         TEXT    NOT NULL, -- the request that inserted this row
  created_at      INTEGER NOT NULL  -- unix milliseconds
) STRICT;

CREATE TABLE lab_loose_charges (
  id              TEXT    NOT NULL,
  scope           TEXT    NOT NULL,
  idempotency_key TEXT    NOT NULL,
  order_id        TEXT    NOT NULL,
  amount_satang   INTEGER NOT NULL,
  gateway_ref     TEXT    NOT NULL,
  request         TEXT    NOT NULL,
  created_at      INTEGER NOT NULL
) STRICT;
