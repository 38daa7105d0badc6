-- The gateway's ledger is read by key only. Its charge ids are random
-- and never looked up, so their unique index cost every payment an index
-- entry and guarded nothing the key does not.
ALTER TABLE gateway.charges DROP CONSTRAINT IF EXISTS charges_id_key;
