-- The presenter's wrong-token count of each client address, one for every
-- server on this database: guesses sent to one server count on all. A row
-- holds the tries the address had left at a moment (the web package says
-- how they come back); rows old enough to be full again are deleted.
CREATE TABLE wrong_tokens (
  client text             PRIMARY KEY,
  left_tries double precision NOT NULL,
  at     timestamptz      NOT NULL
);
CREATE INDEX wrong_tokens_at ON wrong_tokens (at);
