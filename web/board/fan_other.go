//go:build !unix

package board

// canFan says whether this system lets the fan writer write to a socket
// without waiting: not here, so every page's stream writes its own wakes.
const canFan = false

func rawWrite(fd uintptr, b []byte) int { return 0 }
