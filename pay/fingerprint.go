package pay

import (
	"crypto/sha256"
	"encoding/hex"
)

// Fingerprint identifies what a request asks for: the method, the path and
// the canonical body. Two requests with one key must share it, or the
// second is a misuse of the key (422).
func Fingerprint(method, path string, canonicalBody []byte) string {
	h := sha256.New()
	h.Write([]byte(method))
	h.Write([]byte{0})
	h.Write([]byte(path))
	h.Write([]byte{0})
	h.Write(canonicalBody)
	return hex.EncodeToString(h.Sum(nil))
}
