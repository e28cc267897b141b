package manual

import "syscall"

// mapAnon maps n bytes of zeroed, private, anonymous memory.
func mapAnon(n int) ([]byte, bool) {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	return b, err == nil
}

// unmapAnon unmaps a mapAnon mapping. Munmap fails only for an address
// that is not a mapping, which Buf's mapped flag rules out.
func unmapAnon(b []byte) { _ = syscall.Munmap(b) }
