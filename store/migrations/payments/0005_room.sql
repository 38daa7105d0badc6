-- The room a server on this file keeps across restarts: the presenter's
-- fault switches, the lab's settings, the chapter, step mode, the demo
-- clock's offset and the count of resets, as one JSON document that only
-- the web package reads, with the version the room had when it was
-- written. One row, as in PostgreSQL's room table.
CREATE TABLE room (
  id      INTEGER PRIMARY KEY CHECK (id = 1),
  state   TEXT    NOT NULL DEFAULT '{}',
  version INTEGER NOT NULL DEFAULT 0
) STRICT;
INSERT INTO room (id) VALUES (1);
