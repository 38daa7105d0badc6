-- The simulated payment gateway's own memory. It is keyed by the
-- idempotency key we pass on, exactly like a real provider would be.
CREATE TABLE gateway_charges (
  key           TEXT    PRIMARY KEY,
  id            TEXT    NOT NULL UNIQUE,
  order_id      TEXT    NOT NULL,
  amount_satang INTEGER NOT NULL,
  created_at    INTEGER NOT NULL
) STRICT;
