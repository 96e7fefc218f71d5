package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// newHCLogger returns an hclog.Logger (what raft logs through) that writes
// to l, keeping each line's level.
func newHCLogger(l *slog.Logger) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:            "raft",
		Level:           hclog.Info,
		Output:          newLevelWriter(l),
		DisableTime:     true,
		IncludeLocation: false,
	})
}

// newStdLogger returns a *log.Logger (what memberlist logs through) that
// writes to l, keeping each line's "[LEVEL]" tag.
func newStdLogger(l *slog.Logger) *log.Logger {
	return log.New(newLevelWriter(l), "", 0)
}

// levelWriter turns "[WARN]  text" lines into slog records, and a warning
// or error that repeats into one line and a summary a minute (repeats).
type levelWriter struct {
	l   *slog.Logger
	rep *repeats
}

var _ io.Writer = (*levelWriter)(nil)

func newLevelWriter(l *slog.Logger) *levelWriter {
	return &levelWriter{l: l, rep: newRepeats(time.Now)}
}

func (w *levelWriter) Write(p []byte) (int, error) {
	ctx := context.Background()
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
		lvl = relevel(lvl, s)
		if !w.l.Enabled(ctx, lvl) {
			continue
		}
		log, notes := w.rep.admit(lvl, s)
		for _, n := range notes {
			w.l.Log(ctx, n.lvl, n.msg, "repeated", n.times, "over", n.over)
		}
		if log {
			w.l.Log(ctx, lvl, s)
		}
	}
	return len(p), nil
}

// relevel is the level of raft's line s, which raft logged at lvl: two
// errors raft logs in its normal course are told at the level of what
// they are. A leader that hears of a newer term steps down ("peer has
// newer term, stopping replication"): every leadership transfer (a
// rebalance, a leader handing over a group it leaves) and every election
// after a leader's silence ends so, and "entering follower state"
// follows. A transport closing under its reader ("failed to decode
// incoming command" with "transport shutdown" or "use of closed network
// connection") is a group or node closing.
func relevel(lvl slog.Level, s string) slog.Level {
	switch {
	case lvl < slog.LevelError:
		return lvl
	case strings.HasPrefix(s, "raft: peer has newer term, stopping replication"):
		return slog.LevelInfo
	case strings.HasPrefix(s, "raft: failed to decode incoming command") &&
		(strings.Contains(s, "transport shutdown") || strings.Contains(s, "use of closed network connection")):
		return slog.LevelDebug
	}
	return lvl
}

// Repeated warnings and errors.
//
// While a peer is down, raft's leader logs a failed heartbeat or append
// several times a second, and memberlist its failed probes: an operator
// gets thousands of identical errors that bury everything else. The first
// of a kind is logged as it comes; then, while it keeps coming, one line a
// repeatWindow says how often it came (with its latest text: the error
// may change); once it has not come for a repeatWindow, a line says how
// many came since the last summary, and the next one is logged in full
// again. A kind is the line without its volatile values: raft's message
// and the peer it names, or for a line of free text the whole line.
const (
	repeatWindow = time.Minute
	// maxRepeatKinds bounds the kinds remembered: beyond it, a new kind
	// is logged every time, as before.
	maxRepeatKinds = 256
)

type repeats struct {
	mu    sync.Mutex
	now   func() time.Time
	kinds map[string]*repeat
}

type repeat struct {
	lvl         slog.Level
	last        string    // the latest line of the kind
	since, seen time.Time // start of the counting, latest line
	times       int       // lines not logged since
}

// repeatNote is a summary line of a kind.
type repeatNote struct {
	lvl   slog.Level
	msg   string
	times int
	over  time.Duration
}

func newRepeats(now func() time.Time) *repeats {
	return &repeats{now: now, kinds: map[string]*repeat{}}
}

// admit reports whether the line is logged, and the summaries due.
// Summaries of kinds that stopped are due at the next line of any kind.
func (r *repeats) admit(lvl slog.Level, s string) (bool, []repeatNote) {
	return r.admitKind(lvl, repeatKind(s), s)
}

// admitKind is admit for the line s of kind k.
func (r *repeats) admitKind(lvl slog.Level, k, s string) (bool, []repeatNote) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	var notes []repeatNote
	for k, e := range r.kinds {
		if now.Sub(e.seen) >= repeatWindow {
			if e.times > 0 {
				notes = append(notes, repeatNote{lvl: slog.LevelInfo, msg: "stopped repeating: " + e.last,
					times: e.times, over: e.seen.Sub(e.since).Round(time.Second)})
			}
			delete(r.kinds, k)
		}
	}
	if lvl < slog.LevelWarn {
		return true, notes
	}
	e, ok := r.kinds[k]
	if !ok {
		if len(r.kinds) < maxRepeatKinds {
			r.kinds[k] = &repeat{lvl: lvl, last: s, since: now, seen: now}
		}
		return true, notes
	}
	e.last, e.seen = s, now
	e.times++
	if over := now.Sub(e.since); over >= repeatWindow {
		notes = append(notes, repeatNote{lvl: e.lvl, msg: "still repeating: " + s, times: e.times, over: over.Round(time.Second)})
		e.times, e.since = 0, now
	}
	return false, notes
}

// hclogPair is the start of an hclog key=value pair after the message:
// ": peer=" or ": server-id=".
var hclogPairs = regexp.MustCompile(`: [A-Za-z][\w.-]*=`)

// hclogPeer is the value naming a peer in raft's lines.
var hclogPeer = regexp.MustCompile(`\b(?:peer|server-id|id)=("[^"]*"|\S+)`)

// repeatKind is what lines of one kind share: for raft's "name: message:
// k=v ..." the message and the peer it names, leaving out the error and
// timings; for any other line the line itself.
func repeatKind(s string) string {
	loc := hclogPairs.FindStringIndex(s)
	if loc == nil {
		return s
	}
	k := s[:loc[0]]
	if m := hclogPeer.FindStringSubmatch(s[loc[0]:]); m != nil {
		k += " " + m[1]
	}
	return k
}

// repeatHandler summarises the repeated warnings and errors of a logger
// of raftmq's own as levelWriter does raft's lines: the raft mux logs
// each connection it refuses, and a node shrunk out of the metadata
// group that still runs dials its peers at every election it stands
// for, a refusal on each peer twice a second for as long as it runs. A
// record's kind is its message and attributes, but for the keys in
// volatile (a remote address, whose port changes with each connection).
type repeatHandler struct {
	next     slog.Handler
	rep      *repeats
	volatile []string
	kind     string // the attributes added by WithAttrs, as the kind shows them
}

func newRepeatHandler(next slog.Handler, volatile ...string) *repeatHandler {
	return &repeatHandler{next: next, rep: newRepeats(time.Now), volatile: volatile}
}

func (h *repeatHandler) Enabled(ctx context.Context, lvl slog.Level) bool {
	return h.next.Enabled(ctx, lvl)
}

func (h *repeatHandler) Handle(ctx context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Message)
	b.WriteString(h.kind)
	rec.Attrs(func(a slog.Attr) bool {
		if !slices.Contains(h.volatile, a.Key) {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		}
		return true
	})
	log, notes := h.rep.admitKind(rec.Level, b.String(), b.String())
	for _, n := range notes {
		r := slog.NewRecord(rec.Time, n.lvl, n.msg, 0)
		r.AddAttrs(slog.Int("repeated", n.times), slog.Duration("over", n.over))
		if err := h.next.Handle(ctx, r); err != nil {
			return err
		}
	}
	if !log {
		return nil
	}
	return h.next.Handle(ctx, rec)
}

func (h *repeatHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(as)
	var b strings.Builder
	b.WriteString(h.kind)
	for _, a := range as {
		if !slices.Contains(h.volatile, a.Key) {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		}
	}
	c.kind = b.String()
	return &c
}

func (h *repeatHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	c.kind = h.kind + " " + name + "."
	return &c
}
