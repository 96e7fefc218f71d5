package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestParseStatTicks_AfterTheCommandName(t *testing.T) {
	// A command name with spaces and a parenthesis; utime 1234, stime 56.
	line := "4242 (beam.smp (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 56 0 0 20 0 30 0 100 0 0"
	got, err := parseStatTicks(line)
	if err != nil || got != 1290 {
		t.Fatalf("ticks %d, %v; want 1290", got, err)
	}
	if _, err := parseStatTicks("4242 (x) S 1 2"); err == nil {
		t.Fatal("a short line was read")
	}
}

func TestSampleBrokers_ThisProcess(t *testing.T) {
	s, err := sampleBrokers([]int{os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	if s[0].rssAnon <= 0 || s[0].ticks < 0 || len(s[0].switches) == 0 {
		t.Fatalf("sample %+v", s[0])
	}
	if _, err := sampleBrokers([]int{1 << 30}); err == nil {
		t.Fatal("a process that does not exist was sampled")
	}
	if _, err := parsePIDs("12, x"); err == nil {
		t.Fatal("-pids took a name")
	}
}

func TestParseSwitches_VoluntaryAndNot(t *testing.T) {
	status := "Name:\traftmq\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t1200\nnonvoluntary_ctxt_switches:\t34\n"
	if n, err := parseSwitches(status); err != nil || n != 1234 {
		t.Fatalf("switches %d, %v; want 1234", n, err)
	}
	for _, bad := range []string{
		"Name:\traftmq\n",
		"voluntary_ctxt_switches:\t12\n",
		"voluntary_ctxt_switches:\tx\nnonvoluntary_ctxt_switches:\t1\n",
	} {
		if _, err := parseSwitches(bad); err == nil {
			t.Fatalf("%q was read", bad)
		}
	}
}

// Only threads alive at both samples count: one that began in between
// would bring all its switches since it began, one that ended none.
func TestSwitchesBetween_ThreadsAtBothSamples(t *testing.T) {
	before := map[int]int64{1: 100, 2: 50, 3: 7}
	after := map[int]int64{1: 130, 2: 55, 4: 9000}
	if n := switchesBetween(before, after); n != 35 {
		t.Fatalf("switches %d, want 35", n)
	}
}

func TestBrokerCosts_PerHundredThousandAndPerQueued(t *testing.T) {
	before := []brokerSample{{pid: 1, ticks: 100, rssAnon: 1000}, {pid: 2, ticks: 50, rssAnon: 2000}}
	after := []brokerSample{{pid: 1, ticks: 400, rssAnon: 1000 + 50000}, {pid: 2, ticks: 150, rssAnon: 2000 + 100000}}
	b := brokerCosts(before, after, 200000, 0)
	// 3 s + 1 s for 200,000 messages is 2 s per 100,000.
	if b.CPUPer100k != 2 || b.CPUSeconds[0] != 3 || b.CPUSeconds[1] != 1 {
		t.Fatalf("cpu %+v", b)
	}
	if b.BytesPerQueued[0] != 256 || b.BytesPerQueued[1] != 512 {
		t.Fatalf("bytes per queued %v, want 256 and 512", b.BytesPerQueued)
	}
	if c := brokerCosts(before, after, 200000, 200000); len(c.BytesPerQueued) != 0 {
		t.Fatalf("a drained run reports memory per queued message: %v", c.BytesPerQueued)
	}
	raw, _ := json.Marshal(report{Mode: "throughput", Brokers: b})
	if !strings.Contains(string(raw), `"cpu_s_per_100k":2`) || !strings.Contains(string(raw), `"bytes_per_queued":[256,512]`) {
		t.Fatalf("report JSON %s", raw)
	}
	if raw, _ := json.Marshal(report{}); strings.Contains(string(raw), "cpu_s_per_100k") {
		t.Fatalf("a report without -pids has broker fields: %s", raw)
	}
}
