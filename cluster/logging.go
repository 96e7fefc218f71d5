package cluster

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// newHCLogger returns an hclog.Logger (what raft logs through) that writes
// to l, keeping each line's level.
func newHCLogger(l *slog.Logger) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:            "raft",
		Level:           hclog.Info,
		Output:          &levelWriter{l: l},
		DisableTime:     true,
		IncludeLocation: false,
	})
}

// newStdLogger returns a *log.Logger (what memberlist logs through) that
// writes to l, keeping each line's "[LEVEL]" tag.
func newStdLogger(l *slog.Logger) *log.Logger {
	return log.New(&levelWriter{l: l}, "", 0)
}

// levelWriter turns "[WARN]  text" lines into slog records.
type levelWriter struct{ l *slog.Logger }

var _ io.Writer = (*levelWriter)(nil)

func (w *levelWriter) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		s := string(line)
		lvl := slog.LevelInfo
		for tag, v := range map[string]slog.Level{
			"[TRACE]": slog.LevelDebug - 4, "[DEBUG]": slog.LevelDebug,
			"[INFO]": slog.LevelInfo, "[WARN]": slog.LevelWarn, "[ERR]": slog.LevelError,
			"[ERROR]": slog.LevelError,
		} {
			if i := strings.Index(s, tag); i >= 0 {
				lvl = v
				s = strings.TrimSpace(s[i+len(tag):])
				break
			}
		}
		if w.l.Enabled(context.Background(), lvl) {
			w.l.Log(context.Background(), lvl, s)
		}
	}
	return len(p), nil
}
