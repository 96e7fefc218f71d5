package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// queuesReport is the queues mode's account: how fast -count queues were
// declared, and what the brokers cost while the queues sat idle.
type queuesReport struct {
	Declared    int64   `json:"declared"`
	DeclareRate float64 `json:"declared_per_s"`
	IdleSeconds float64 `json:"idle_s"`
	// SettleSeconds is how long the idle window waited for after the
	// declares (-settle).
	SettleSeconds float64 `json:"settle_s"`
	// IdleCPUShare is each -pids process's CPU over the idle time, as a
	// share of one core.
	IdlePIDs     []int     `json:"idle_pids,omitempty"`
	IdleCPUShare []float64 `json:"idle_cpu_share,omitempty"`
	// IdleSwitchesPerS is each process's context switches a second over
	// the idle time: how often it slept and woke, which is what an idle
	// process's CPU is made of, counted rather than timed (a machine's
	// noise moves the CPU an idle node takes by a third from run to run).
	IdleSwitchesPerS []float64 `json:"idle_switches_per_s,omitempty"`
}

// runQueues declares o.Count durable queues named <queue>-N from
// o.Producers connections at once (spread over the URLs), then, after
// o.Settle, leaves them idle for o.Duration and reads each -pids process's CPU over that
// time: what a cluster of many idle queues costs a node.
func runQueues(ctx context.Context, o *options, out io.Writer) (*report, error) {
	workers := max(o.Producers, 1)
	var next, declared atomic.Int64
	errc := make(chan error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func(uri string) {
			defer wg.Done()
			conn, err := dial(uri)
			if err != nil {
				errc <- fmt.Errorf("connect: %w", err)
				return
			}
			defer conn.Close()
			ch, err := conn.Channel()
			if err != nil {
				errc <- err
				return
			}
			for ctx.Err() == nil {
				i := next.Add(1)
				if i > int64(o.Count) {
					return
				}
				name := fmt.Sprintf("%s-%d", o.Queue, i)
				if _, err := ch.QueueDeclare(name, true, false, false, false, o.QueueArgs); err != nil {
					errc <- fmt.Errorf("declare %s: %w", name, err)
					return
				}
				declared.Add(1)
			}
		}(o.URIs[w%len(o.URIs)])
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	select {
	case err := <-errc:
		return nil, err
	default:
	}
	q := &queuesReport{Declared: declared.Load(), DeclareRate: float64(declared.Load()) / secs}
	fmt.Fprintf(out, "declared %d queues in %.2f s (%.0f/s); idle for %v after %v\n", q.Declared, secs, q.DeclareRate, o.Duration, o.Settle)
	settleFrom := time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(o.Settle):
	}
	q.SettleSeconds = time.Since(settleFrom).Seconds()

	before, err := sampleBrokers(o.PIDs)
	if err != nil {
		return nil, err
	}
	idleFrom := time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(o.Duration):
	}
	q.IdleSeconds = time.Since(idleFrom).Seconds()
	if len(before) > 0 {
		for _, s := range before {
			q.IdlePIDs = append(q.IdlePIDs, s.pid)
		}
		after, err := sampleBrokers(q.IdlePIDs)
		if err != nil {
			return nil, err
		}
		for i, s := range before {
			q.IdleCPUShare = append(q.IdleCPUShare, float64(after[i].ticks-s.ticks)/clockTicks/q.IdleSeconds)
			q.IdleSwitchesPerS = append(q.IdleSwitchesPerS, float64(switchesBetween(s.switches, after[i].switches))/q.IdleSeconds)
		}
	}
	return &report{Mode: o.Mode, Seconds: secs, Queues: q}, nil
}
