package metrics

import (
	"fmt"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/raftmq/raftmq/api/ops"
)

// HandlerOptions configure NewHandler.
type HandlerOptions struct {
	// Node is the local node (required).
	Node ops.Node
	// Metrics is served on /metrics; nil builds one from Node, Conns,
	// Stats, PerQueue and MaxQueues (use New directly to keep its
	// ObserveApply hook).
	Metrics *Metrics
	// Conns, Stats, PerQueue and MaxQueues are as in Options.
	Conns     ops.Connections
	Stats     func() ops.StateStats
	PerQueue  bool
	MaxQueues int
	// Pprof serves net/http/pprof under /debug/pprof/.
	Pprof bool
	// Serving, when set, reports whether the node's AMQP listeners are
	// open; /readyz is 503 until they are, so a load balancer sends no
	// client to a port that refuses it.
	Serving func() bool
}

// NewHandler serves /metrics and /metrics/per-object (the same with
// RabbitMQ's queue series per queue), /healthz (200 while the process
// runs), /readyz (200 once the node is a member of a cluster with a known
// leader, has applied the leader's defaults, takes clients and serves
// AMQP, 503 with the reason otherwise) and, when enabled, /debug/pprof/.
func NewHandler(o HandlerOptions) http.Handler {
	mux := http.NewServeMux()
	m := o.Metrics
	if m == nil {
		m = New(Options{Node: o.Node, Conns: o.Conns, Stats: o.Stats, PerQueue: o.PerQueue, MaxQueues: o.MaxQueues})
	}
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry(), promhttp.HandlerOpts{}))
	mux.Handle("/metrics/per-object", promhttp.HandlerFor(m.PerObjectRegistry(), promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		reason := ops.NotReady(o.Node)
		if reason == "" && o.Serving != nil && !o.Serving() {
			reason = "the AMQP listener is not open yet"
		}
		if reason != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintln(w, reason)
			return
		}
		_, _ = fmt.Fprintln(w, "ready")
	})
	if o.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
