-- The books of each workshop student's gateway (web/workshop): the
-- simulated provider their endpoint charges through, idempotent by the
-- key per student, kept here so that a restarted server's gateways still
-- know every charge and key they took. seq keeps the order charged.
CREATE TABLE workshop_charges (
  seq           INTEGER PRIMARY KEY,
  student       TEXT    NOT NULL,
  key           TEXT    NOT NULL,
  id            TEXT    NOT NULL,
  order_id      TEXT    NOT NULL,
  amount_satang INTEGER NOT NULL,
  created_at    INTEGER NOT NULL,
  UNIQUE (student, key)
) STRICT;
CREATE INDEX workshop_charges_by_order ON workshop_charges (student, order_id, seq);
