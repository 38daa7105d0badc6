-- When each workshop student was removed: a removal deletes the rows older
-- than pay.WorkshopRemovedFor, by then no charge of theirs can be on its
-- way to the books. The rows removed before this column came are stamped
-- with the time it came, so that they too are kept that long.
ALTER TABLE workshop_removed ADD COLUMN IF NOT EXISTS removed_at timestamptz NOT NULL DEFAULT now();
