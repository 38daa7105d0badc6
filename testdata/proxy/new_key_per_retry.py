#!/usr/bin/env python3
"""The article's first mistake: a new key on every retry, which is the
same as no key at all."""
import retrying


class NewKeyPerRetry(retrying.Client):
    name = "new-key-per-retry"

    def key_for_retry(self, key, last_status):
        return self.new_key()


if __name__ == "__main__":
    retrying.main(NewKeyPerRetry)
