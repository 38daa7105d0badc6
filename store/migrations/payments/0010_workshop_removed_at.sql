-- When each workshop student was removed: a removal deletes the rows older
-- than pay.WorkshopRemovedFor, by then no charge of theirs can be on its
-- way to the books. The rows removed before this column came are stamped
-- with the time it came, so that they too are kept that long.
ALTER TABLE workshop_removed ADD COLUMN removed_at INTEGER NOT NULL DEFAULT 0;
UPDATE workshop_removed SET removed_at = CAST(unixepoch('subsec') * 1000 AS INTEGER);
