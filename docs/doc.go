// Package docs holds the manual. Its tests check that every relative link
// and anchor in README.md and docs/ resolves, and that the commands the
// README tells a newcomer to run exist. The flag tables of the manual are
// generated from the binaries' own --help:
//
//go:generate go run ../internal/flagdoc -docs .
package docs
