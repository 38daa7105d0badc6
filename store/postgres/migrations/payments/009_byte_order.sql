-- Keys, scopes, charge ids and order ids are identifiers, compared for
-- equality and never sorted for a reader: they compare byte by byte
-- (COLLATE "C"). Under the database's own collation every comparison in
-- their indexes (each claim's and each save's several) went through the
-- locale's string comparison, copying both strings first; in bytes it is
-- a memcmp (a tie-break sorted by one orders UTF-8 text by code
-- point). Changing a column's collation rewrites no row, only its
-- indexes. The lab's table of loose charges is read together with the
-- charge table (UNION ALL, sorted by id), so its columns follow.
ALTER TABLE idempotency_keys
  ALTER COLUMN scope TYPE text COLLATE "C",
  ALTER COLUMN key TYPE text COLLATE "C";
ALTER TABLE charges
  ALTER COLUMN id TYPE text COLLATE "C",
  ALTER COLUMN scope TYPE text COLLATE "C",
  ALTER COLUMN idempotency_key TYPE text COLLATE "C",
  ALTER COLUMN order_id TYPE text COLLATE "C";
ALTER TABLE lab_loose_charges
  ALTER COLUMN id TYPE text COLLATE "C",
  ALTER COLUMN scope TYPE text COLLATE "C",
  ALTER COLUMN idempotency_key TYPE text COLLATE "C",
  ALTER COLUMN order_id TYPE text COLLATE "C";

-- The index of charges by time served only reads that run seldom (the
-- live pages' model loading: at its start, after a gap, after it fell
-- behind; the lab's scan for keys of personal data, while such keys are
-- in play), and every charge paid for it with an entry at the right edge
-- of the index, where every payment's insert meets the others'. Those
-- reads now scan the table and keep the newest rows.
DROP INDEX IF EXISTS charges_created;
