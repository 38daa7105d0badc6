//go:build unix

package board

import "syscall"

// canFan says whether this system lets the fan writer write to a socket
// without waiting (rawWrite).
const canFan = true

// rawWrite makes one write system call of b to fd, a socket the runtime
// keeps non-blocking, and returns how much it took (0 when it took none).
func rawWrite(fd uintptr, b []byte) int {
	for {
		n, err := syscall.Write(int(fd), b)
		if err == syscall.EINTR {
			continue
		}
		return max(n, 0)
	}
}
