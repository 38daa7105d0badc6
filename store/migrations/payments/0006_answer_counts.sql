-- What each life of a server answered since the room's last reset, as the
-- live board counts it (requests, refusals, lost answers, replays, 409s,
-- 422s): these are not in the keys and charges, and a restarted server
-- starts its board from them. One row per server life (origin), written
-- about once a second while the counts change and at shutdown; rows of an
-- earlier reset (gen) are deleted by the next write.
CREATE TABLE answer_counts (
  origin     TEXT    PRIMARY KEY,
  gen        INTEGER NOT NULL,
  requests   INTEGER NOT NULL,
  rejected   INTEGER NOT NULL,
  lost       INTEGER NOT NULL,
  replays    INTEGER NOT NULL,
  conflicts  INTEGER NOT NULL,
  mismatches INTEGER NOT NULL
) STRICT;
