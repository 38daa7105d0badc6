#!/usr/bin/env python3
"""Retries every error, a 400 or a 422 too, which fail however often
they are sent."""
import retrying


class RetryEvery4xx(retrying.Client):
    name = "retry-every-4xx"

    def retryable(self, status):
        return status >= 400


if __name__ == "__main__":
    retrying.main(RetryEvery4xx)
