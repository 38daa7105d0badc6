-- What each life of a server answered since the room's last reset, as the
-- live board counts it (requests, refusals, lost answers, replays, 409s,
-- 422s): these are not in the keys and charges, and a restarted server
-- starts its board from them. One row per server life (origin), written
-- about once a second while the counts change and at shutdown; rows of an
-- earlier reset (gen) are deleted by the next write.
CREATE TABLE IF NOT EXISTS answer_counts (
  origin     text COLLATE "C" PRIMARY KEY,
  gen        bigint NOT NULL,
  requests   bigint NOT NULL,
  rejected   bigint NOT NULL,
  lost       bigint NOT NULL,
  replays    bigint NOT NULL,
  conflicts  bigint NOT NULL,
  mismatches bigint NOT NULL
);
