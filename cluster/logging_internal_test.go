package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// records keeps what a logger wrote.
type records struct {
	mu   sync.Mutex
	recs []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	s := rec.Level.String() + " " + rec.Message
	rec.Attrs(func(a slog.Attr) bool {
		s += " " + a.Key + "=" + a.Value.String()
		return true
	})
	r.mu.Lock()
	r.recs = append(r.recs, s)
	r.mu.Unlock()
	return nil
}

func (r *records) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.recs
	r.recs = nil
	return out
}

// While a peer is down raft logs a failed heartbeat every few hundred
// milliseconds: one line in full, then a summary a minute with the count
// and the latest error, then a line when it stops. Another peer's errors
// and other lines are not held back.
func TestLevelWriter_SummarisesRepeatedErrors(t *testing.T) {
	rec := &records{}
	now := time.Unix(1000, 0)
	w := &levelWriter{l: slog.New(rec), rep: newRepeats(func() time.Time { return now })}
	hb := func(peer, err string) {
		fmt.Fprintf(w, "[ERROR] raft: failed to heartbeat to: peer=%s backoff time=%dms error=%q\n", peer, 10+now.Second(), err)
	}

	hb("10.0.0.2:5681", "dial tcp 10.0.0.2:5681: connect: connection refused")
	if got := rec.take(); len(got) != 1 || !strings.HasPrefix(got[0], "ERROR raft: failed to heartbeat to: peer=10.0.0.2:5681") {
		t.Fatalf("first failure: %q", got)
	}
	// 200 more over the next minute (every 300 ms), one with another error.
	for i := 1; i <= 199; i++ {
		now = now.Add(300 * time.Millisecond)
		hb("10.0.0.2:5681", "dial tcp 10.0.0.2:5681: connect: connection refused")
	}
	fmt.Fprintln(w, "[INFO]  raft: entering leader state")
	fmt.Fprintln(w, "[WARN]  raft: failed to contact: server-id=n3 time=500ms")
	hb("10.0.0.3:5681", "i/o timeout")
	if got := rec.take(); len(got) != 3 || !strings.Contains(got[0], "entering leader") || !strings.Contains(got[1], "server-id=n3") || !strings.Contains(got[2], "10.0.0.3") {
		t.Fatalf("other lines held back or repeats let through: %q", got)
	}
	now = now.Add(300 * time.Millisecond) // a minute since the first
	hb("10.0.0.2:5681", "dial tcp 10.0.0.2:5681: i/o timeout")
	got := rec.take()
	if len(got) != 1 || !strings.HasPrefix(got[0], "ERROR still repeating: raft: failed to heartbeat to: peer=10.0.0.2:5681") ||
		!strings.Contains(got[0], "i/o timeout") || !strings.HasSuffix(got[0], "repeated=200 over=1m0s") {
		t.Fatalf("summary: %q", got)
	}
	// Ten more, then quiet for a minute: the next line of any kind brings
	// the count since the summary; the next failure is logged in full.
	for range 10 {
		now = now.Add(300 * time.Millisecond)
		hb("10.0.0.2:5681", "connection refused")
	}
	now = now.Add(repeatWindow)
	fmt.Fprintln(w, "[INFO]  raft: pipelining replication: peer=10.0.0.2:5681")
	got = rec.take()
	if len(got) != 2 || !strings.HasPrefix(got[0], "INFO stopped repeating: raft: failed to heartbeat to: peer=10.0.0.2:5681") ||
		!strings.HasSuffix(got[0], "repeated=10 over=3s") || !strings.Contains(got[1], "pipelining") {
		t.Fatalf("after it stopped: %q", got)
	}
	hb("10.0.0.2:5681", "connection refused")
	if got := rec.take(); len(got) != 1 || !strings.HasPrefix(got[0], "ERROR raft: failed to heartbeat") {
		t.Fatalf("a new failure after the quiet: %q", got)
	}
}

// Free-text lines (memberlist's) repeat only when identical, and the kinds
// remembered are bounded: beyond them every line is logged.
func TestRepeats_FreeTextAndBound(t *testing.T) {
	now := time.Unix(0, 0)
	r := newRepeats(func() time.Time { return now })
	if ok, _ := r.admit(slog.LevelWarn, "memberlist: Failed to send ping: timeout"); !ok {
		t.Fatal("first line held")
	}
	if ok, _ := r.admit(slog.LevelWarn, "memberlist: Failed to send ping: timeout"); ok {
		t.Fatal("identical repeat logged")
	}
	if ok, _ := r.admit(slog.LevelWarn, "memberlist: Failed to send ping: refused"); !ok {
		t.Fatal("a different line held")
	}
	for i := range maxRepeatKinds {
		r.admit(slog.LevelError, fmt.Sprintf("line %d", i))
	}
	if len(r.kinds) != maxRepeatKinds {
		t.Fatalf("%d kinds remembered, want at most %d", len(r.kinds), maxRepeatKinds)
	}
	for range 2 {
		if ok, _ := r.admit(slog.LevelError, "one line too many"); !ok {
			t.Fatal("a line beyond the bound held")
		}
	}
}

// Two errors raft logs in its normal course (a leader stepping down at
// a newer term, a transport closing under its reader) are told at the
// level of what they are; the same messages for other causes, and other
// errors, keep raft's level.
func TestLevelWriter_RoutineRaftErrorsAreToldAsWhatTheyAre(t *testing.T) {
	rec := &records{}
	w := &levelWriter{l: slog.New(rec), rep: newRepeats(time.Now)}
	for _, c := range []struct{ line, want string }{
		{`[ERROR] raft: peer has newer term, stopping replication: peer="{Voter n2 127.0.0.1:25692}"`, "INFO raft: peer has newer term"},
		{`[ERROR] raft: failed to decode incoming command: error="transport shutdown"`, "DEBUG raft: failed to decode"},
		{`[ERROR] raft: failed to decode incoming command: error="read tcp 127.0.0.1:25691->127.0.0.1:47234: use of closed network connection"`, "DEBUG raft: failed to decode"},
		{`[ERROR] raft: failed to decode incoming command: error="msgpack decode error [pos 3]: invalid"`, "ERROR raft: failed to decode"},
		{`[ERROR] raft: failed to appendEntries to: peer="{Voter n4 127.0.0.1:25704}" error=EOF`, "ERROR raft: failed to appendEntries"},
		{`[WARN]  raft: heartbeat timeout reached, starting election`, "WARN raft: heartbeat timeout"},
	} {
		fmt.Fprintln(w, c.line)
		if got := rec.take(); len(got) != 1 || !strings.HasPrefix(got[0], c.want) {
			t.Errorf("%s: logged %q, want %q", c.line, got, c.want)
		}
	}
}

// The raft mux's refusals of a node that dials again and again (shrunk
// out of the metadata group, it stands for election twice a second)
// come once in full, then as a summary a minute: the remote address,
// whose port changes with each connection, is no part of the kind, the
// reason and the group are.
func TestRepeatHandler_SummarisesRepeatedRefusals(t *testing.T) {
	rec := &records{}
	now := time.Unix(1000, 0)
	log := slog.New(&repeatHandler{next: rec, rep: newRepeats(func() time.Time { return now }), volatile: []string{"remote"}}).With("node", "n1")
	refuse := func(port int, reason string) {
		log.Warn("raft mux: refused a connection", "remote", fmt.Sprintf("127.0.0.1:%d", port), "group", "", "reason", reason)
	}
	const cert = `the peer certificate names ["n2"], no server of the raft configuration`
	refuse(40000, cert)
	if got := rec.take(); len(got) != 1 || !strings.Contains(got[0], "remote=127.0.0.1:40000") {
		t.Fatalf("first refusal: %q", got)
	}
	for i := 1; i < 150; i++ { // 75 s
		now = now.Add(500 * time.Millisecond)
		refuse(40000+i, cert)
	}
	if got := rec.take(); len(got) != 1 || !strings.HasPrefix(got[0], "WARN still repeating: raft mux: refused a connection node=n1 group= reason="+cert) ||
		!strings.Contains(got[0], "repeated=") {
		t.Fatalf("a minute of refusals: %q", got)
	}
	refuse(41000, "reading the header: EOF")
	if got := rec.take(); len(got) != 1 || !strings.Contains(got[0], "reason=reading the header: EOF") {
		t.Fatalf("another reason: %q", got)
	}
	log.Info("queue group started", "group", "q1")
	if got := rec.take(); len(got) != 1 {
		t.Fatalf("an info line: %q", got)
	}
}
