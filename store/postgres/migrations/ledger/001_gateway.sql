-- The simulated payment gateway's own memory, in a schema of its own: it
-- stands for another company's system, and paytwice's tables never join
-- it. It is keyed by the idempotency key we pass on, as a real provider's.
CREATE SCHEMA IF NOT EXISTS gateway;

CREATE TABLE gateway.charges (
  key           text        PRIMARY KEY,
  id            text        NOT NULL UNIQUE,
  order_id      text        NOT NULL,
  amount_satang bigint      NOT NULL,
  created_at    timestamptz NOT NULL
);
