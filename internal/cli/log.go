package cli

import (
	"io"
	"log/slog"
)

// NewLogger returns a command's logger: JSON (format "json") or text
// (format "text") records at level and above, to w.
func NewLogger(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
