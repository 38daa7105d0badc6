-- Idempotency keys: one row per (scope, key). The primary key is the guard
-- that lets exactly one of many concurrent requests claim a key.
CREATE TABLE idempotency_keys (
  scope           TEXT    NOT NULL,
  key             TEXT    NOT NULL,
  method          TEXT    NOT NULL,
  path            TEXT    NOT NULL,
  fingerprint     TEXT    NOT NULL,
  order_id        TEXT    NOT NULL,
  amount_satang   INTEGER NOT NULL,
  status          TEXT    NOT NULL CHECK (status IN ('started', 'done')),
  response_status INTEGER,
  response_body   TEXT,
  created_at      INTEGER NOT NULL, -- unix milliseconds
  locked_at       INTEGER NOT NULL,
  completed_at    INTEGER,
  PRIMARY KEY (scope, key)
) STRICT, WITHOUT ROWID;

CREATE INDEX idempotency_keys_status_created ON idempotency_keys (status, created_at);

-- Charges: the money. UNIQUE (scope, idempotency_key) is the second guard:
-- even a bug in the key protocol cannot record two charges for one key.
CREATE TABLE charges (
  id              TEXT    PRIMARY KEY,
  scope           TEXT    NOT NULL,
  idempotency_key TEXT    NOT NULL,
  order_id        TEXT    NOT NULL,
  amount_satang   INTEGER NOT NULL CHECK (amount_satang > 0),
  gateway_ref     TEXT    NOT NULL,
  created_at      INTEGER NOT NULL,
  UNIQUE (scope, idempotency_key)
) STRICT;

CREATE INDEX charges_scope_order ON charges (scope, order_id);
CREATE INDEX charges_created ON charges (created_at);
