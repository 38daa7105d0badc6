-- How many charges each workshop student's books pruned, oldest first,
-- to stay within their bound; with the rows held, every charge the
-- gateway took. A charge locks its student's row here first, so that
-- one student's charges and prunes take turns. The index finds a
-- student's oldest and newest charges.
CREATE TABLE IF NOT EXISTS workshop_books (
  student text COLLATE "C" PRIMARY KEY,
  pruned  bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS workshop_charges_by_student ON workshop_charges (student, seq);
