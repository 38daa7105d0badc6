-- The workshop students whose books were deleted because the presenter
-- removed them: a charge of theirs that reaches the store afterwards (one
-- in flight on another server sharing it) is refused, not kept as a row
-- of no student.
CREATE TABLE workshop_removed (
  student TEXT PRIMARY KEY
) STRICT;
