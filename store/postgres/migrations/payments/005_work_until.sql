-- How long the claiming request's work may run, on the database's clock:
-- its work deadline, fixed at the claim. Step mode lets a presenter hold a
-- request for minutes, longer than the lock timeout, so another server's
-- sweeper takes a key only once both the lock timeout and this deadline
-- have passed. NULL (a key claimed by an older server, or by the lab's
-- own writes) leaves the lock timeout alone to decide.
ALTER TABLE idempotency_keys ADD COLUMN work_until timestamptz;
