package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Brokers is what a run cost the broker processes named by -pids, read
// from /proc before and after it (so the processes must run on this
// machine): CPU seconds, user and system, and resident anonymous memory.
type Brokers struct {
	PIDs []int `json:"broker_pids"`
	// CPUSeconds is each process's CPU time over the run, from before the
	// first publish to the end of the consumers' drain.
	CPUSeconds []float64 `json:"broker_cpu_s"`
	// CPUPer100k is all of them per 100,000 messages published.
	CPUPer100k float64 `json:"cpu_s_per_100k"`
	// RSSAnonStartKiB and RSSAnonKiB are each process's RssAnon before
	// and after the run.
	RSSAnonStartKiB []int64 `json:"rss_anon_start_kib"`
	RSSAnonKiB      []int64 `json:"rss_anon_kib"`
	// BytesPerQueued is, for a run without consumers (messages left
	// queued), each process's RssAnon above its start per message queued.
	BytesPerQueued []float64 `json:"bytes_per_queued,omitempty"`
}

// clockTicks is the unit of utime and stime in /proc/PID/stat (USER_HZ,
// 100 on Linux's supported architectures).
const clockTicks = 100

type brokerSample struct {
	pid     int
	ticks   int64
	rssAnon int64 // KiB
	// switches are each thread's context switches, voluntary and not,
	// by thread id: how often the process was put to sleep and woken,
	// which is what an idle process pays for.
	switches map[int]int64
}

func parsePIDs(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("-pids: %q is not a process id", f)
		}
		out = append(out, pid)
	}
	return out, nil
}

// sampleBrokers reads each process's CPU ticks and RssAnon.
func sampleBrokers(pids []int) ([]brokerSample, error) {
	out := make([]brokerSample, 0, len(pids))
	for _, pid := range pids {
		ticks, err := procTicks(pid)
		if err != nil {
			return nil, err
		}
		rss, err := procRSSAnon(pid)
		if err != nil {
			return nil, err
		}
		sw, err := procSwitches(pid)
		if err != nil {
			return nil, err
		}
		out = append(out, brokerSample{pid: pid, ticks: ticks, rssAnon: rss, switches: sw})
	}
	return out, nil
}

// brokersSince is what the processes sampled in before cost up to now,
// for the run r reports; nil without -pids.
func brokersSince(before []brokerSample, r *report) (*Brokers, error) {
	if len(before) == 0 {
		return nil, nil
	}
	pids := make([]int, len(before))
	for i, s := range before {
		pids[i] = s.pid
	}
	after, err := sampleBrokers(pids)
	if err != nil {
		return nil, err
	}
	return brokerCosts(before, after, r.Published, r.Consumed), nil
}

// brokerCosts compares two samples of the same processes.
func brokerCosts(before, after []brokerSample, published, consumed int64) *Brokers {
	b := &Brokers{}
	total := 0.0
	for i, s := range before {
		cpu := float64(after[i].ticks-s.ticks) / clockTicks
		total += cpu
		b.PIDs = append(b.PIDs, s.pid)
		b.CPUSeconds = append(b.CPUSeconds, cpu)
		b.RSSAnonStartKiB = append(b.RSSAnonStartKiB, s.rssAnon)
		b.RSSAnonKiB = append(b.RSSAnonKiB, after[i].rssAnon)
		if queued := published - consumed; consumed == 0 && queued > 0 {
			b.BytesPerQueued = append(b.BytesPerQueued, float64((after[i].rssAnon-s.rssAnon)*1024)/float64(queued))
		}
	}
	if published > 0 {
		b.CPUPer100k = total * 100000 / float64(published)
	}
	return b
}

// procTicks is utime+stime of pid, in clock ticks.
func procTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatTicks(string(b))
}

// parseStatTicks reads utime and stime (fields 14 and 15) from a
// /proc/PID/stat line; the command name, field 2, may hold spaces and
// parentheses, so fields are counted after its last ')'.
func parseStatTicks(stat string) (int64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("no command name in /proc/PID/stat")
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3, the state
	if len(f) < 13 {
		return 0, errors.New("short /proc/PID/stat")
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/PID/stat: %w", err)
	}
	return u + s, nil
}

// procRSSAnon is RssAnon of pid, in KiB.
func procRSSAnon(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no RssAnon in /proc/%d/status", pid)
}

// procSwitches is the context switches of each thread of pid.
func procSwitches(pid int) (map[int]int64, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[int]int64, len(tasks))
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), "status"))
		if err != nil {
			// The thread ended since the directory was read.
			continue
		}
		n, err := parseSwitches(string(b))
		if err != nil {
			return nil, fmt.Errorf("%s/%d/status: %w", dir, tid, err)
		}
		out[tid] = n
	}
	return out, nil
}

// parseSwitches is voluntary_ctxt_switches plus nonvoluntary_ctxt_switches
// of a /proc status file.
func parseSwitches(status string) (int64, error) {
	var total int64
	found := 0
	for _, line := range strings.Split(status, "\n") {
		rest, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:")
		if !ok {
			rest, ok = strings.CutPrefix(line, "nonvoluntary_ctxt_switches:")
		}
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
		if err != nil {
			return 0, err
		}
		total += n
		found++
	}
	if found != 2 {
		return 0, errors.New("no context switch counts")
	}
	return total, nil
}

// switchesBetween is the context switches of the threads alive at both
// samples, between them (a thread that ended or began in between is left
// out: a Go process's threads live as long as it does, as a rule).
func switchesBetween(before, after map[int]int64) int64 {
	var n int64
	for tid, a := range after {
		if b, ok := before[tid]; ok && a >= b {
			n += a - b
		}
	}
	return n
}

// print writes the brokers' lines of the text report.
func (b *Brokers) print(w io.Writer) {
	if b == nil {
		return
	}
	total := 0.0
	for _, c := range b.CPUSeconds {
		total += c
	}
	fmt.Fprintf(w, "brokers' CPU: %.2f s (%s), %.2f s per 100,000 messages\n", total, joinFloats(b.CPUSeconds, "%.2f"), b.CPUPer100k)
	fmt.Fprintf(w, "brokers' RssAnon: %s KiB (at the start %s)\n", joinInts(b.RSSAnonKiB), joinInts(b.RSSAnonStartKiB))
	if len(b.BytesPerQueued) > 0 {
		fmt.Fprintf(w, "RssAnon above the start per queued message: %s bytes\n", joinFloats(b.BytesPerQueued, "%.0f"))
	}
}

func joinFloats(fs []float64, format string) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = fmt.Sprintf(format, f)
	}
	return strings.Join(s, " / ")
}

func joinInts(is []int64) string {
	s := make([]string, len(is))
	for i, n := range is {
		s[i] = strconv.FormatInt(n, 10)
	}
	return strings.Join(s, " / ")
}
