//go:build !linux

package versitygw

// supportsUserXattrs assumes the file system takes extended attributes.
func supportsUserXattrs(string) bool { return true }
