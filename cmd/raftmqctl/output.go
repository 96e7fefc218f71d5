package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"google.golang.org/protobuf/encoding/protojson"
	protobuf "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/proto"
)

// column is one selectable column of a listing.
type column[T any] struct {
	name string
	get  func(T) any
}

// listing prints items with the columns named in args (defaults when
// none), as an aligned table (without its header row with
// --no-table-headers) or, with --json, as a JSON array of objects.
func listing[T any](c *call, items []T, cols []column[T], defaults []string) error {
	names := c.args
	if len(names) == 0 {
		names = defaults
	}
	byName := make(map[string]column[T], len(cols))
	for _, col := range cols {
		byName[col.name] = col
	}
	sel := make([]column[T], 0, len(names))
	for _, n := range names {
		col, ok := byName[n]
		if !ok {
			known := make([]string, len(cols))
			for i, col := range cols {
				known[i] = col.name
			}
			return usagef("unknown column %q (columns: %s)", n, strings.Join(known, " "))
		}
		sel = append(sel, col)
	}
	if c.o.json {
		rows := make([]map[string]any, 0, len(items))
		for _, it := range items {
			row := make(map[string]any, len(sel))
			for _, col := range sel {
				row[col.name] = col.get(it)
			}
			rows = append(rows, row)
		}
		return writeJSON(c.out, rows)
	}
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	cells := make([]string, len(sel))
	for i, col := range sel {
		cells[i] = col.name
	}
	if !c.o.noHeaders {
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	for _, it := range items {
		for i, col := range sel {
			cells[i] = cell(col.get(it))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// cell formats one value for a table.
func cell(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return ""
	case map[string]any, []any, []string:
		b, _ := json.Marshal(x)
		return string(b)
	default:
		return fmt.Sprint(x)
	}
}

// writeJSON writes v as one indented JSON document.
func writeJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// writeProtoJSON writes a message as one JSON document with stable
// formatting (protojson output is re-indented).
func writeProtoJSON(w io.Writer, m protobuf.Message) error {
	b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	return writeJSON(w, v)
}

// policyJSON is the DEFINITION argument of set_policy.
type policyJSON struct {
	MessageTTL           *int64  `json:"message-ttl"`
	Expires              *int64  `json:"expires"`
	DeadLetterExchange   *string `json:"dead-letter-exchange"`
	DeadLetterRoutingKey *string `json:"dead-letter-routing-key"`
	MaxLength            *int64  `json:"max-length"`
	MaxLengthBytes       *int64  `json:"max-length-bytes"`
	Overflow             *string `json:"overflow"`
	DeliveryLimit        *int64  `json:"delivery-limit"`
	ConsumerTimeout      *int64  `json:"consumer-timeout"`
	DelayedRetryType     *string `json:"delayed-retry-type"`
	DelayedRetryMin      *int64  `json:"delayed-retry-min"`
	DelayedRetryMax      *int64  `json:"delayed-retry-max"`
	DelayedRetryMult     *int64  `json:"delayed-retry-multiplier"`
	QueueLeaderLocator   *string `json:"queue-leader-locator"`
}

// parseDefinition reads a policy definition; unknown keys are an error.
func parseDefinition(s string) (*proto.PolicyDefinition, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	var p policyJSON
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("policy definition %s: %v", s, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("policy definition %s: trailing data", s)
	}
	return &proto.PolicyDefinition{
		MessageTtl: p.MessageTTL, Expires: p.Expires,
		DeadLetterExchange: p.DeadLetterExchange, DeadLetterRoutingKey: p.DeadLetterRoutingKey,
		MaxLength: p.MaxLength, MaxLengthBytes: p.MaxLengthBytes, Overflow: p.Overflow,
		DeliveryLimit: p.DeliveryLimit, ConsumerTimeout: p.ConsumerTimeout,
		DelayedRetryType: p.DelayedRetryType, DelayedRetryMin: p.DelayedRetryMin, DelayedRetryMax: p.DelayedRetryMax,
		DelayedRetryMultiplier: p.DelayedRetryMult, QueueLeaderLocator: p.QueueLeaderLocator,
	}, nil
}
