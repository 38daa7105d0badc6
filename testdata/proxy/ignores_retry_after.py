#!/usr/bin/env python3
"""Backs off with its own jittered waits and never reads Retry-After."""
import retrying


class IgnoresRetryAfter(retrying.Client):
    name = "ignores-retry-after"

    def wait(self, n, retry_after):
        return self.backoff(n)


if __name__ == "__main__":
    retrying.main(IgnoresRetryAfter)
