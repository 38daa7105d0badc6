#!/usr/bin/env python3
"""Keeps its key, except after a 500, when it starts afresh under a new
key without looking the order up: the charge may already have happened."""
import retrying


class NewKeyAfter500(retrying.Client):
    name = "new-key-after-500"

    def key_for_retry(self, key, last_status):
        return self.new_key() if last_status == 500 else key


if __name__ == "__main__":
    retrying.main(NewKeyAfter500)
