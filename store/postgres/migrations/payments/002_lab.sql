-- The common-mistakes lab, "check first, then insert": the lab's
-- deliberately unguarded copy of the key and charge tables. No primary
-- key on (scope, key), no UNIQUE, so nothing in the database stops a
-- second row for the same key. Only that lab mode reads or writes them.
CREATE TABLE lab_loose_keys (
  id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  scope           text        NOT NULL,
  key             text        NOT NULL,
  fingerprint     text        NOT NULL,
  order_id        text        NOT NULL,
  amount_satang   bigint      NOT NULL,
  status          text        NOT NULL, -- 'started' | 'done'
  response_status integer,
  response_body   bytea,
  request         text        NOT NULL, -- the request that inserted this row
  created_at      timestamptz NOT NULL
);

CREATE TABLE lab_loose_charges (
  seq             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id              text        NOT NULL,
  scope           text        NOT NULL,
  idempotency_key text        NOT NULL,
  order_id        text        NOT NULL,
  amount_satang   bigint      NOT NULL,
  gateway_ref     text        NOT NULL,
  request         text        NOT NULL,
  created_at      timestamptz NOT NULL
);
