-- How many charges each workshop student's books pruned, oldest first,
-- to stay within their bound; with the rows held, every charge the
-- gateway took. The index finds a student's oldest and newest charges.
CREATE TABLE workshop_books (
  student TEXT    PRIMARY KEY,
  pruned  INTEGER NOT NULL
) STRICT;
CREATE INDEX workshop_charges_by_student ON workshop_charges (student, seq);
