//go:build !unix

package main

// holdSQLiteFile does nothing where flock(2) is missing: there, running
// one server per SQLite file is up to the user.
func holdSQLiteFile(string, string) (func() error, error) { return func() error { return nil }, nil }
