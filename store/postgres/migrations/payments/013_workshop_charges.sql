-- The books of each workshop student's gateway (web/workshop): the
-- simulated provider their endpoint charges through, idempotent by the
-- key per student, shared by every server so that a restarted server, or
-- another one, knows every charge and key the gateway took. seq keeps the
-- order charged. Keys and students compare as bytes (COLLATE "C").
CREATE TABLE IF NOT EXISTS workshop_charges (
  seq           bigserial PRIMARY KEY,
  student       text COLLATE "C" NOT NULL,
  key           text COLLATE "C" NOT NULL,
  id            text        NOT NULL,
  order_id      text COLLATE "C" NOT NULL,
  amount_satang bigint      NOT NULL,
  created_at    timestamptz NOT NULL,
  UNIQUE (student, key)
);
CREATE INDEX IF NOT EXISTS workshop_charges_by_order ON workshop_charges (student, order_id, seq);
