package cli

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// FormatTime formats milliseconds since the epoch as RFC 3339 in UTC, with
// milliseconds; a time that is no date prints as the number.
func FormatTime(ms float64) string {
	if math.IsNaN(ms) || math.IsInf(ms, 0) || math.Abs(ms) > 8.64e15 {
		return strconv.FormatFloat(ms, 'g', -1, 64)
	}
	return time.UnixMilli(int64(ms)).UTC().Format("2006-01-02T15:04:05.000Z")
}

// FormatBytes formats a size with a binary unit.
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
