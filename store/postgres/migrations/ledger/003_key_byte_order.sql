-- The gateway's records are found by key, an identifier: its index
-- compares bytes (COLLATE "C"), not the database's locale (see the
-- payments migration 009).
ALTER TABLE gateway.charges ALTER COLUMN key TYPE text COLLATE "C";
