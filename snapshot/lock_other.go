//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package snapshot

// lockTarget does not lock where there is no flock(2): two restores into one
// target at once are then the caller's to avoid (the package documentation
// says what they break).
func lockTarget(parent, base string) (unlock func(), err error) {
	return func() {}, nil
}
