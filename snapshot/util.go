package snapshot

import "strconv"

func quote(s string) string { return strconv.Quote(s) }
