package e2e

import (
	"strings"
	"testing"
	"time"
)

// A dead letter counts in the round its deadline falls in, not the one it
// was published in: a message sent just before a power cut and due during
// it is the power cut's, and the power cut's row reports no target, while
// the rows where a majority ran are held to crashLateTarget over the
// messages confirmed within crashFastConfirm.
func TestCrashSummary_DeathsCountWhereTheyFallDue(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	rounds := []crashRound{
		{kind: noFault, start: at(0)},
		{kind: killOne, start: at(1000)},
		{kind: powerCut, start: at(4000), back: at(6000)},
		{kind: killLeader, start: at(9000)},
	}
	rec := &crashRecorder{sent: map[string]*crashSent{}, got: map[string]time.Time{},
		redelivered: map[string]bool{}, node: map[string]int{}}
	send := func(id string, sent, confirmed, received int, redelivered bool) {
		rec.published(id, &crashSent{ttl: true, at: at(sent)})
		rec.confirmed(id, at(confirmed))
		rec.received(id, at(received), 0, redelivered)
	}
	// Sent in the kill-random round, due (3,500 ms) before the power cut.
	send("a", 1500, 1510, 3520, false)
	// Sent in the kill-random round, due (4,500 ms) in the power cut and
	// dead-lettered when it was over, 2.5 s late.
	send("b", 2500, 2510, 7000, false)
	send("c", 2600, 2610, 7000, true)
	// Due in the kill-leader round: one on time, one confirmed slowly and
	// very late, which the target leaves out.
	send("d", 8000, 8010, 10050, false)
	send("e", 8100, 9500, 16000, false)
	rows := rec.summarize(rounds, at(12000))
	byKind := map[string]crashRow{}
	for _, r := range rows {
		byKind[r.kind] = r
	}
	if r := byKind[killOne]; r.samples != 1 || r.latenessP99 != 20*time.Millisecond || r.target() != "2s met" {
		t.Errorf("kill-random: %d samples, p99 %v, target %q; want a alone, 20ms, met", r.samples, r.latenessP99, r.target())
	}
	if r := byKind[powerCut]; r.samples != 2 || r.latenessP99 != 2500*time.Millisecond || r.target() != "n/a" ||
		r.lateFirst != 1 || r.lateRedelivered != 1 {
		t.Errorf("power-cut: %+v, target %q; want b and c, p99 2.5s, n/a, one late first delivery and one redelivered", r, r.target())
	}
	if r := byKind[killLeader]; r.samples != 1 || r.all != 2 || r.latenessP99 != 50*time.Millisecond ||
		r.lateAll != 5900*time.Millisecond || r.target() != "2s met" {
		t.Errorf("kill-leader: %+v, target %q; want d as the sample, e in p99-all, met", r, r.target())
	}
	late := crashRow{kind: killLeader, samples: 1, latenessP99: 2100 * time.Millisecond}
	if got := late.target(); got != "2s MISSED" {
		t.Errorf("a kill-leader row 2.1s late: target %q, want 2s MISSED", got)
	}
	var tbl strings.Builder
	writeCrashTable(&tbl, rows)
	if !strings.Contains(tbl.String(), "n/a") || !strings.Contains(tbl.String(), "2s met") {
		t.Errorf("table without its target column:\n%s", tbl.String())
	}
}
