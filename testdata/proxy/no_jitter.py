#!/usr/bin/env python3
"""Exponential backoff without jitter: every client that failed at the
same moment comes back at the same moment."""
import retrying


class NoJitter(retrying.Client):
    name = "no-jitter"
    base = 0.3
    cap = 0.6

    def backoff(self, n):
        return min(self.cap, self.base * 2**n)


if __name__ == "__main__":
    retrying.main(NoJitter)
