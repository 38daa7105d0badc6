-- The workshop (web/workshop) every server on this database shows: whether
-- it is open, the presenter's gateway faults, each student's registration
-- and latest run, and the rows hidden from the scoreboard, as one JSON
-- document that only the web package reads. One row. text, not jsonb: the
-- document is read back as it was written, and a reason quoted from a
-- student's answer may hold a character jsonb refuses (U+0000).
CREATE TABLE IF NOT EXISTS workshop (
  id    boolean PRIMARY KEY DEFAULT true CHECK (id),
  state text    NOT NULL DEFAULT '{}'
);
INSERT INTO workshop DEFAULT VALUES ON CONFLICT DO NOTHING;
