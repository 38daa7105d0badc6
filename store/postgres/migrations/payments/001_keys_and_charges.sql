-- Idempotency keys: one row per (scope, key). The primary key is the guard
-- that lets exactly one of many concurrent requests, on any number of
-- servers, claim a key.
CREATE TABLE idempotency_keys (
  scope           text        NOT NULL,
  key             text        NOT NULL,
  method          text        NOT NULL,
  path            text        NOT NULL,
  fingerprint     text        NOT NULL,
  order_id        text        NOT NULL,
  amount_satang   bigint      NOT NULL,
  status          text        NOT NULL CHECK (status IN ('started', 'done')),
  response_status integer,
  response_body   bytea,
  created_at      timestamptz NOT NULL,
  locked_at       timestamptz NOT NULL,
  completed_at    timestamptz,
  -- The fencing token of the claim that holds the key: completing and
  -- releasing name it, so a request whose claim was closed meanwhile can
  -- no longer touch a row that is now someone else's.
  claim           text        NOT NULL,
  -- The key the charge is recorded under and the gateway is called with;
  -- empty means key itself (only the lab sets another).
  charge_key      text        NOT NULL DEFAULT '',
  -- Which server's sweeper has taken this started key, and until when (in
  -- real time, not the demo clock): the other servers' sweepers pass it
  -- over, so two servers never close the same key.
  sweep_owner     text,
  sweep_until     timestamptz,
  PRIMARY KEY (scope, key)
);

CREATE INDEX idempotency_keys_started ON idempotency_keys (locked_at) WHERE status = 'started';
CREATE INDEX idempotency_keys_done_created ON idempotency_keys (created_at) WHERE status = 'done';
CREATE INDEX idempotency_keys_locked ON idempotency_keys (locked_at DESC);

-- Charges: the money. UNIQUE (scope, idempotency_key) is the second guard:
-- even a bug in the key protocol cannot record two charges for one key.
CREATE TABLE charges (
  id              text        PRIMARY KEY,
  scope           text        NOT NULL,
  idempotency_key text        NOT NULL,
  order_id        text        NOT NULL,
  amount_satang   bigint      NOT NULL CHECK (amount_satang > 0),
  gateway_ref     text        NOT NULL,
  created_at      timestamptz NOT NULL,
  UNIQUE (scope, idempotency_key)
);

CREATE INDEX charges_scope_order ON charges (scope, order_id);
CREATE INDEX charges_created ON charges (created_at);
