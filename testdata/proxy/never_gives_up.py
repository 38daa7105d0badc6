#!/usr/bin/env python3
"""Retries until it gets an answer it likes, however long that takes."""
import retrying


class NeverGivesUp(retrying.Client):
    name = "never-gives-up"

    def gives_up(self, retries_done, elapsed, next_wait):
        return False


if __name__ == "__main__":
    retrying.main(NeverGivesUp)
