-- The workshop (web/workshop) a server on this file keeps across
-- restarts: whether it is open, the presenter's gateway faults, each
-- student's registration and latest run, and the rows hidden from the
-- scoreboard, as one JSON document that only the web package reads. One
-- row, as in PostgreSQL's workshop table.
CREATE TABLE workshop (
  id    INTEGER PRIMARY KEY CHECK (id = 1),
  state TEXT    NOT NULL DEFAULT '{}'
) STRICT;
INSERT INTO workshop (id) VALUES (1);
