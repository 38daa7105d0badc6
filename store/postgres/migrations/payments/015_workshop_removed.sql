-- The workshop students whose books were deleted because the presenter
-- removed them: a charge of theirs that reaches the database afterwards
-- (one in flight on another server) is refused, not kept as a row of no
-- student.
CREATE TABLE IF NOT EXISTS workshop_removed (
  student text COLLATE "C" PRIMARY KEY
);
