#!/usr/bin/env python3
"""Jittered waits under a ceiling that never grows: the waits are spread,
but the fifth retry comes as soon as the first, so an API that is down
meets the same pressure however long it stays down."""
import retrying


class NoGrowth(retrying.Client):
    name = "no-growth"
    ceiling = 0.2

    def backoff(self, n):
        return self.rng.uniform(0, self.ceiling)


if __name__ == "__main__":
    retrying.main(NoGrowth)
