// Package pay is paytwice's domain and its payment protocol: the errors
// with their codes, the charge, key and body parsing, the fingerprint, the
// rule of what is saved and replayed, and claim → work → save as a
// service that returns typed outcomes. Storage and the payment gateway
// sit behind the small interfaces declared here; the package imports
// nothing of this project, no HTTP framework and no database driver.
package pay
