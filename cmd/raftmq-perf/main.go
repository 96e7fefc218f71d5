// Command raftmq-perf is a load generator for AMQP 0-9-1 brokers, in the
// spirit of RabbitMQ's PerfTest: publishers and consumers spread over node
// URLs, confirms with an in-flight window, prefetch and acks, rates and
// latency percentiles, and an expiry mode that measures how late messages
// with a TTL are dead-lettered. Nothing in it is specific to raftmq, so the
// same run can be pointed at RabbitMQ.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// options are the flags of one run.
type options struct {
	URIs       []string
	Producers  int
	Consumers  int
	Size       int
	Persistent bool
	Confirm    int
	Prefetch   int
	AutoAck    bool
	Rate       float64
	Duration   time.Duration
	Count      int
	Queue      string
	QueueArgs  amqp.Table
	Expiration string
	Mode       string
	TTL        time.Duration
	HeadTTL    time.Duration
	Interval   time.Duration
	CPUProfile string
	// Slow, when set, prints every delivery whose end-to-end latency is at
	// least this long, with when it was published and received, so that a
	// stall can be matched with a trace of the brokers.
	Slow time.Duration
	PIDs []int
	// Delayed mode (delayed.go).
	DelayMin    time.Duration
	DelaySpread time.Duration
	DelaySame   time.Duration
	Exchange    string
	Phase       string
	Expect      string
	Grace       time.Duration
	Linger      time.Duration
	// Settle is how long queues mode waits after the declares before its
	// idle window: the nodes finish what the burst left (the last
	// entries' replication and apply, the connections' close, the log
	// caches let go) in the first seconds.
	Settle time.Duration
}

func parseOptions(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("raftmq-perf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	uris := fs.String("uri", "amqp://guest:guest@localhost:5672/", "comma-separated broker URLs; clients are spread over them round-robin")
	fs.IntVar(&o.Producers, "producers", 1, "publishing connections")
	fs.IntVar(&o.Consumers, "consumers", 1, "consuming connections")
	fs.IntVar(&o.Size, "size", 1024, "message body size in bytes (at least 16)")
	fs.BoolVar(&o.Persistent, "persistent", true, "publish with delivery mode 2")
	fs.IntVar(&o.Confirm, "confirm", 256, "publisher confirms with this many messages in flight per producer (0: no confirms)")
	fs.IntVar(&o.Prefetch, "prefetch", 100, "consumer prefetch (basic.qos)")
	fs.BoolVar(&o.AutoAck, "autoack", false, "consume with no-ack")
	fs.Float64Var(&o.Rate, "rate", 0, "messages per second per producer (0: as fast as possible)")
	fs.DurationVar(&o.Duration, "duration", 25*time.Second, "how long producers publish")
	fs.IntVar(&o.Count, "count", 0, "messages per producer (0: until -duration)")
	fs.StringVar(&o.Queue, "queue", "perf", "queue name")
	qargs := fs.String("queue-args", "", `queue arguments as JSON, e.g. {"x-message-ttl":2000,"x-max-length":100000}`)
	fs.StringVar(&o.Expiration, "expiration", "", "per-message expiration (ms, as a string)")
	fs.StringVar(&o.Mode, "mode", "throughput", "throughput; expiry: publish -count messages with -ttl into a dead-lettered queue and measure how late they die; "+
		"delayed: publish -count messages with an x-delay through an x-delayed-message exchange and measure how late they arrive; "+
		"queues: declare -count queues (default 1000) from -producers connections, then read the -pids processes' CPU while they sit idle for -duration")
	fs.DurationVar(&o.TTL, "ttl", 2*time.Second, "expiry mode: the messages' TTL")
	fs.DurationVar(&o.HeadTTL, "head-ttl", 0, "expiry mode: first publish one message with this TTL, so the others sit behind it")
	fs.DurationVar(&o.Interval, "interval", time.Second, "how often a progress line is printed")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write the tool's own CPU profile to this file")
	fs.DurationVar(&o.Slow, "slow", 0, "print each delivery whose end-to-end latency is at least this (0: none), with its publish and receive times; in delayed mode each first arrival at least this late, with its time")
	pids := fs.String("pids", "", "comma-separated process ids of the brokers' nodes (this machine): the report gains their CPU seconds per 100,000 messages and their resident anonymous memory (in delayed mode, before and after publishing)")
	fs.DurationVar(&o.DelaySpread, "delay-spread", 10*time.Second, "delayed mode: delays spread uniformly over this window, after -delay-min")
	fs.DurationVar(&o.DelayMin, "delay-min", 0, "delayed mode: the shortest delay")
	fs.DurationVar(&o.DelaySame, "delay-same", 0, "delayed mode: every message due at one instant, this long after the start (instead of -delay-spread)")
	fs.StringVar(&o.Exchange, "exchange", "", "delayed mode: the x-delayed-message exchange (default: the queue's name + \"-dx\")")
	fs.StringVar(&o.Phase, "phase", "", "delayed mode: publish (and save what was confirmed in -expect) or consume (what -expect names); empty: both at once")
	fs.StringVar(&o.Expect, "expect", "", "delayed mode: the file of expected messages that -phase publish writes and -phase consume reads")
	fs.DurationVar(&o.Grace, "grace", 30*time.Second, "delayed mode: how long after the last due time the consumer waits for missing messages")
	fs.DurationVar(&o.Settle, "settle", 0, "queues mode: how long to wait after the declares before the idle CPU is read")
	fs.DurationVar(&o.Linger, "linger", 2*time.Second, "delayed mode: how long the consumer goes on once everything arrived, to see duplicates")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var err error
	if o.PIDs, err = parsePIDs(*pids); err != nil {
		return nil, err
	}
	durationSet := false
	fs.Visit(func(f *flag.Flag) { durationSet = durationSet || f.Name == "duration" })
	for _, u := range strings.Split(*uris, ",") {
		if u = strings.TrimSpace(u); u != "" {
			o.URIs = append(o.URIs, u)
		}
	}
	if len(o.URIs) == 0 {
		return nil, errors.New("-uri names no broker")
	}
	if *qargs != "" {
		var m map[string]any
		if err := json.Unmarshal([]byte(*qargs), &m); err != nil {
			return nil, fmt.Errorf("-queue-args: %w", err)
		}
		o.QueueArgs = amqp.Table{}
		for k, v := range m {
			if f, ok := v.(float64); ok && f == float64(int64(f)) {
				v = int64(f) // JSON numbers are integers on the wire, as PerfTest sends them
			}
			o.QueueArgs[k] = v
		}
	}
	switch {
	case o.Size < 16:
		return nil, fmt.Errorf("-size must be at least 16 (the body carries timestamps), got %d", o.Size)
	case o.Producers < 0 || o.Consumers < 0 || o.Confirm < 0 || o.Prefetch < 0 || o.Count < 0 || o.Rate < 0:
		return nil, errors.New("counts and rates must not be negative")
	case o.Mode != "throughput" && o.Mode != "expiry" && o.Mode != "delayed" && o.Mode != "queues":
		return nil, fmt.Errorf("-mode must be throughput, expiry, delayed or queues, got %q", o.Mode)
	case o.Mode == "queues" && o.Count == 0:
		o.Count = 1000
	case o.Mode == "expiry" && o.Count == 0:
		o.Count = 10000
	}
	if o.Mode == "delayed" {
		if err := checkDelayed(o, durationSet); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// counters are the run's totals, updated by every client.
type counters struct {
	published, confirmed, nacked, consumed atomic.Int64
	gaps                                   confirmGaps
}

// confirmGaps tracks the longest time without any confirm, from the start
// of publishing to its end: how long publishing stalled, as when the
// leader is killed mid-run.
type confirmGaps struct {
	mu      sync.Mutex
	last    time.Time
	longest time.Duration
}

// mark records a confirm (or the start of publishing) at t.
func (g *confirmGaps) mark(t time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.last.IsZero() {
		g.longest = max(g.longest, t.Sub(g.last))
	}
	if t.After(g.last) {
		g.last = t
	}
}

func (g *confirmGaps) max() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.longest
}

// report is the final JSON line.
type report struct {
	Mode      string  `json:"mode"`
	Seconds   float64 `json:"seconds"`
	Published int64   `json:"published"`
	Confirmed int64   `json:"confirmed"`
	Nacked    int64   `json:"nacked"`
	Consumed  int64   `json:"consumed"`
	// ConsumedInRun is what consumers had received when publishing ended:
	// a consumer keeps pace when it is close to Published.
	ConsumedInRun    int64    `json:"consumed_in_run"`
	PublishRate      float64  `json:"published_per_s"`
	ConfirmRate      float64  `json:"confirmed_per_s"`
	ConsumeRate      float64  `json:"consumed_per_s"`
	ConfirmLatency   summary  `json:"confirm_latency"`
	EndToEndLatency  summary  `json:"end_to_end_latency"`
	DeathLateness    *summary `json:"death_lateness,omitempty"`
	DeadLettered     int64    `json:"dead_lettered,omitempty"`
	DeadLetteredLost int64    `json:"dead_lettered_missing,omitempty"`
	// Delayed is the delayed mode's account of what arrived and when.
	Delayed *delayedReport `json:"delayed,omitempty"`
	// Queues is the queues mode's account (queues.go).
	Queues *queuesReport `json:"queues,omitempty"`
	// MaxConfirmGapMs is the longest time without a confirm while
	// publishing.
	MaxConfirmGapMs float64 `json:"max_confirm_gap_ms,omitempty"`
	// Brokers is what -pids names cost over the run (brokers.go).
	*Brokers
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseOptions(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "raftmq-perf: %v\n", err)
		return 2
	}
	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "raftmq-perf: -cpuprofile: %v\n", err)
			return 2
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	before, err := sampleBrokers(o.PIDs)
	if err != nil {
		fmt.Fprintf(stderr, "raftmq-perf: -pids: %v\n", err)
		return 2
	}
	rep, err := execute(ctx, o, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "raftmq-perf: %v\n", err)
		return 1
	}
	if rep.Brokers, err = brokersSince(before, rep); err != nil {
		fmt.Fprintf(stderr, "raftmq-perf: -pids: %v (the report goes without it)\n", err)
	}
	printReport(stdout, rep)
	return 0
}

// execute runs the load described by o and returns the final report;
// progress lines go to out.
func execute(ctx context.Context, o *options, out io.Writer) (*report, error) {
	switch o.Mode {
	case "expiry":
		return runExpiry(ctx, o, out)
	case "delayed":
		return runDelayed(ctx, o, out)
	case "queues":
		return runQueues(ctx, o, out)
	}
	setup, err := dial(o.URIs[0])
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer setup.Close()
	sch, err := setup.Channel()
	if err != nil {
		return nil, err
	}
	if _, err := sch.QueueDeclare(o.Queue, true, false, false, false, o.QueueArgs); err != nil {
		return nil, fmt.Errorf("declare %s: %w", o.Queue, err)
	}

	var c counters
	confirmLat, e2eLat := newLatencies(1<<20), newLatencies(1<<20)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, o.Producers+o.Consumers)
	var consumersWG, producersWG sync.WaitGroup
	consCtx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	for i := 0; i < o.Consumers; i++ {
		consumersWG.Add(1)
		ready := make(chan struct{})
		go func(uri string) {
			defer consumersWG.Done()
			if err := consume(consCtx, uri, o, &c, e2eLat, ready); err != nil && consCtx.Err() == nil {
				errc <- fmt.Errorf("consumer: %w", err)
			}
		}(o.URIs[(i+1)%len(o.URIs)])
		select {
		case <-ready:
		case err := <-errc:
			return nil, err
		}
	}
	start := time.Now()
	c.gaps.mark(start)
	pubCtx, stopPublishing := context.WithTimeout(runCtx, o.Duration)
	defer stopPublishing()
	for i := 0; i < o.Producers; i++ {
		producersWG.Add(1)
		go func(uri string) {
			defer producersWG.Done()
			if err := produce(pubCtx, uri, o, &c, confirmLat, nil); err != nil && pubCtx.Err() == nil {
				errc <- fmt.Errorf("producer: %w", err)
			}
		}(o.URIs[i%len(o.URIs)])
	}
	pubDone := make(chan struct{})
	go func() { producersWG.Wait(); close(pubDone) }()

	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	var last [3]int64
	lastT := start
	printProgress := func(now time.Time) {
		cur := [3]int64{c.published.Load(), c.confirmed.Load(), c.consumed.Load()}
		dt := now.Sub(lastT).Seconds()
		fmt.Fprintf(out, "%6.1fs  published %8.0f/s  confirmed %8.0f/s  consumed %8.0f/s\n", now.Sub(start).Seconds(),
			float64(cur[0]-last[0])/dt, float64(cur[1]-last[1])/dt, float64(cur[2]-last[2])/dt)
		last, lastT = cur, now
	}
	var runErr error
loop:
	for {
		select {
		case now := <-tick.C:
			printProgress(now)
		case <-pubDone:
			break loop
		case runErr = <-errc:
			cancel()
			break loop
		}
	}
	pubEnd := time.Now()
	if o.Confirm > 0 && o.Producers > 0 {
		// Confirms that stopped for good count up to the end of publishing.
		c.gaps.mark(pubEnd)
	}
	consumedInRun := c.consumed.Load()
	// Let consumers drain what was confirmed, for at most 10 s.
	drain := time.NewTimer(10 * time.Second)
	defer drain.Stop()
	for o.Consumers > 0 && runErr == nil && c.consumed.Load() < c.confirmed.Load()+unconfirmed(o, &c) {
		select {
		case <-drain.C:
			fmt.Fprintf(out, "consumers did not drain within 10 s: %d of %d\n", c.consumed.Load(), c.published.Load())
			goto done
		case runErr = <-errc:
		case <-time.After(20 * time.Millisecond):
		}
	}
done:
	stopConsumers()
	consumersWG.Wait()
	if runErr != nil {
		return nil, runErr
	}
	secs := pubEnd.Sub(start).Seconds()
	return &report{
		Mode: o.Mode, Seconds: secs,
		Published: c.published.Load(), Confirmed: c.confirmed.Load(), Nacked: c.nacked.Load(), Consumed: c.consumed.Load(),
		ConsumedInRun: consumedInRun,
		PublishRate:   float64(c.published.Load()) / secs, ConfirmRate: float64(c.confirmed.Load()) / secs,
		ConsumeRate:    float64(c.consumed.Load()) / secs,
		ConfirmLatency: confirmLat.summary(), EndToEndLatency: e2eLat.summary(),
		MaxConfirmGapMs: ms(c.gaps.max()),
	}, nil
}

// unconfirmed is what consumers may still get beyond the confirmed count:
// without confirms every published message.
func unconfirmed(o *options, c *counters) int64 {
	if o.Confirm == 0 {
		return c.published.Load()
	}
	return 0
}

// stampBody writes the send time (unix ns) at the start of body.
func stampBody(body []byte, t time.Time) { binary.BigEndian.PutUint64(body, uint64(t.UnixNano())) }

func bodyTime(body []byte) (time.Time, bool) {
	if len(body) < 8 {
		return time.Time{}, false
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(body))), true
}

// shaper shapes the messages of one producer: shape fills the body of its
// n-th message, sent at now, and says where it goes and with which headers;
// confirmed hears of the broker's answer to it. nil: stamped bodies to
// o.Queue through the default exchange.
type shaper interface {
	shape(n int, now time.Time, body []byte) (exchange, key string, headers amqp.Table)
	confirmed(n int, ack bool)
}

// sentMsg is what a producer remembers of a message until its confirm.
type sentMsg struct {
	t time.Time
	n int
}

func produce(ctx context.Context, uri string, o *options, c *counters, confirmLat *latencies, sh shaper) error {
	conn, err := dial(uri)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	mode := amqp.Transient
	if o.Persistent {
		mode = amqp.Persistent
	}
	var (
		inflight chan struct{}
		sent     sync.Map // seq -> sentMsg
		confDone = make(chan struct{})
	)
	if o.Confirm > 0 {
		if err := ch.Confirm(false); err != nil {
			return err
		}
		inflight = make(chan struct{}, o.Confirm)
		confirms := ch.NotifyPublish(make(chan amqp.Confirmation, o.Confirm))
		go func() {
			defer close(confDone)
			for cf := range confirms {
				now := time.Now()
				c.gaps.mark(now)
				if v, ok := sent.LoadAndDelete(cf.DeliveryTag); ok {
					s := v.(sentMsg)
					confirmLat.add(now.Sub(s.t))
					if sh != nil {
						sh.confirmed(s.n, cf.Ack)
					}
				}
				if cf.Ack {
					c.confirmed.Add(1)
				} else {
					c.nacked.Add(1)
				}
				<-inflight
			}
		}()
	} else {
		close(confDone)
	}
	// Pacing follows a schedule (message n is due at start + n/rate), so a
	// late wake-up is caught up on instead of lowering the rate, as a
	// ticker that drops ticks would. Above 1,000/s a producer sleeps only
	// when it is a millisecond or more ahead and sends what is due in
	// between at once: a timer per message costs the tool more than the
	// publishing (at 4 x 5,000/s it fell short of its rate).
	var interval time.Duration
	if o.Rate > 0 {
		interval = time.Duration(float64(time.Second) / o.Rate)
	}
	slack := time.Duration(0)
	if interval > 0 && interval < time.Millisecond {
		slack = time.Millisecond
	}
	paceStart := time.Now()
	body := make([]byte, o.Size)
	for n := 0; o.Count == 0 || n < o.Count; n++ {
		if interval > 0 {
			if wait := time.Until(paceStart.Add(time.Duration(n) * interval)); wait > 0 && wait >= slack {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
				}
			}
		}
		slot := false
		if inflight != nil {
			select {
			case inflight <- struct{}{}:
				slot = true
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			if slot {
				// No publish goes with this slot: give it back, or the
				// wait for outstanding confirms below runs to its limit.
				<-inflight
			}
			break
		}
		now := time.Now()
		exchange, key, headers := "", o.Queue, amqp.Table(nil)
		if sh != nil {
			exchange, key, headers = sh.shape(n, now, body)
		} else {
			stampBody(body, now)
		}
		seq := ch.GetNextPublishSeqNo()
		if inflight != nil {
			sent.Store(seq, sentMsg{t: now, n: n})
		}
		if err := ch.PublishWithContext(ctx, exchange, key, false, false, amqp.Publishing{
			DeliveryMode: mode, Body: body, Expiration: o.Expiration, Headers: headers,
		}); err != nil {
			if ctx.Err() != nil {
				// The deadline passed before the publish went out (the
				// client checks it first): nothing will confirm this one.
				if slot {
					sent.Delete(seq)
					<-inflight
				}
				break
			}
			return err
		}
		c.published.Add(1)
	}
	// Wait for the outstanding confirms (bounded), then close.
	if inflight != nil {
		deadline := time.Now().Add(10 * time.Second)
		for len(inflight) > 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	err = ch.Close()
	<-confDone
	if err != nil && !errors.Is(err, amqp.ErrClosed) {
		return err
	}
	return nil
}

func consume(ctx context.Context, uri string, o *options, c *counters, e2eLat *latencies, ready chan<- struct{}) error {
	conn, ds, err := openConsumer(uri, o)
	if err != nil {
		return err
	}
	defer conn.Close()
	close(ready)
	return receive(ctx, ds, o.AutoAck, func(d amqp.Delivery) {
		if t, ok := bodyTime(d.Body); ok {
			now := time.Now()
			lat := now.Sub(t)
			e2eLat.add(lat)
			if o.Slow > 0 && lat >= o.Slow {
				fmt.Fprintf(os.Stderr, "slow delivery: %.1f ms, published %s, received %s\n",
					ms(lat), t.UTC().Format("15:04:05.000000"), now.UTC().Format("15:04:05.000000"))
			}
		}
		c.consumed.Add(1)
	})
}

// receive hands each delivery of ds to got and acks it (unless autoAck)
// until ctx ends (nil) or the deliveries stop or an ack fails (an error).
func receive(ctx context.Context, ds <-chan amqp.Delivery, autoAck bool, got func(amqp.Delivery)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-ds:
			if !ok {
				return errors.New("delivery channel closed")
			}
			got(d)
			if !autoAck {
				if err := d.Ack(false); err != nil {
					return err
				}
			}
		}
	}
}

func printReport(w io.Writer, r *report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nmetric\tcount\trate/s\tp50 ms\tp95 ms\tp99 ms\tp99.9 ms\tmax ms")
	fmt.Fprintf(tw, "published\t%d\t%.0f\t\t\t\t\t\n", r.Published, r.PublishRate)
	fmt.Fprintf(tw, "confirmed\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\n", r.Confirmed, r.ConfirmRate,
		r.ConfirmLatency.P50, r.ConfirmLatency.P95, r.ConfirmLatency.P99, r.ConfirmLatency.P999, r.ConfirmLatency.Max)
	fmt.Fprintf(tw, "consumed\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\n", r.Consumed, r.ConsumeRate,
		r.EndToEndLatency.P50, r.EndToEndLatency.P95, r.EndToEndLatency.P99, r.EndToEndLatency.P999, r.EndToEndLatency.Max)
	if r.Mode == "throughput" && r.Seconds > 0 {
		fmt.Fprintf(tw, "consumed in run\t%d\t%.0f\t\t\t\t\t\n", r.ConsumedInRun, float64(r.ConsumedInRun)/r.Seconds)
	}
	if q := r.Queues; q != nil {
		fmt.Fprintf(tw, "queues declared\t%d\t%.0f\t\t\t\t\t\n", q.Declared, q.DeclareRate)
		for i, c := range q.IdleCPUShare {
			fmt.Fprintf(tw, "idle CPU, %% of a core, pid %d\t\t%.2f\t\t\t\t\t\n", q.IdlePIDs[i], 100*c)
		}
		for i, n := range q.IdleSwitchesPerS {
			fmt.Fprintf(tw, "idle context switches per s, pid %d\t\t%.0f\t\t\t\t\t\n", q.IdlePIDs[i], n)
		}
	}
	if r.MaxConfirmGapMs > 0 {
		fmt.Fprintf(tw, "longest wait for a confirm\t\t\t\t\t\t\t%.2f\n", r.MaxConfirmGapMs)
	}
	if d := r.Delayed; d != nil {
		l := d.Lateness
		fmt.Fprintf(tw, "delay lateness\t%d\t\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\n", d.Received, l.P50, l.P95, l.P99, l.P999, l.Max)
		if l := d.LatenessFromConfirm; l.Count > 0 {
			fmt.Fprintf(tw, "delay lateness from the confirm\t%d\t\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\n", l.Count, l.P50, l.P95, l.P99, l.P999, l.Max)
		}
		if l := d.LatenessFromReceived; l != nil {
			fmt.Fprintf(tw, "delay lateness from the broker's receipt\t%d\t\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\n", l.Count, l.P50, l.P95, l.P99, l.P999, l.Max)
		}
	}
	if r.DeathLateness != nil {
		l := r.DeathLateness
		fmt.Fprintf(tw, "death lateness\t%d\t\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\n", r.DeadLettered, l.P50, l.P95, l.P99, l.P999, l.Max)
	}
	tw.Flush()
	r.Brokers.print(w)
	b, _ := json.Marshal(r)
	fmt.Fprintf(w, "%s\n", b)
}
