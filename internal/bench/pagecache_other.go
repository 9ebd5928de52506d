//go:build !linux

package bench

import "os"

// dropPageCache does nothing where the kernel does not map a file's cached
// pages in large folios (see copyCold).
func dropPageCache(*os.File) error { return nil }
