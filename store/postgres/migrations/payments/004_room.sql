-- The room every server on this database shares: the presenter's fault
-- switches, the lab's settings, the current lesson and the demo clock's
-- offset, as one JSON document that only the web package reads. One row:
-- a change locks it (SELECT … FOR UPDATE), so changes made on several
-- servers at once are applied one after the other, and version tells a
-- server whether the state it holds is older than the row's.
CREATE TABLE room (
  id      boolean PRIMARY KEY DEFAULT true CHECK (id),
  state   jsonb   NOT NULL DEFAULT '{}',
  version bigint  NOT NULL DEFAULT 0
);
INSERT INTO room DEFAULT VALUES;
