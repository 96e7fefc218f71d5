package fsm

import (
	"errors"
	"slices"
	"strconv"
	"strings"

	pb "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

// The exchange types that route each message to one of their bindings
// (from protocol level 11): RabbitMQ's consistent-hash plugin, and the
// modulus-hash (4.3) and local-random (4.0) types of its core.
const (
	ConsistentHashType = "x-consistent-hash"
	ModulusHashType    = "x-modulus-hash"
	LocalRandomType    = "x-local-random"
)

// MaxHashWeight is the largest weight (binding key) of a binding to an
// x-consistent-hash exchange: RabbitMQ's bound since 4.1.
const MaxHashWeight = 10000

// hashProperties are the message properties an x-consistent-hash exchange
// may hash on (its hash-property argument).
var hashProperties = []string{"correlation_id", "message_id", "timestamp"}

func pickType(t string) bool {
	return t == ConsistentHashType || t == ModulusHashType || t == LocalRandomType
}

// pickDeclared reports whether t is a picking type and the log has the
// level that knows it.
func (s *state) pickDeclared(t string) bool { return pickType(t) && s.atLeast(levelPicking) }

// pickArgs checks a new x-consistent-hash exchange's arguments as the
// plugin's validate does: hash-header and hash-property exclude each
// other, and the property is one of hashProperties. The plugin crashes
// on a value that is not a string; here that is refused with 406.
func pickArgs(typ string, args *proto.Table) *proto.Result {
	if typ != ConsistentHashType {
		return nil
	}
	header, hasHeader := tableGet(args, "hash-header")
	prop, hasProp := tableGet(args, "hash-property")
	for _, a := range []struct {
		name string
		v    *proto.Value
		has  bool
	}{{"hash-header", header, hasHeader}, {"hash-property", prop, hasProp}} {
		if _, ok := valueString(a.v); a.has && !ok {
			return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - Invalid argument, '"+a.name+"' must be a string")
		}
	}
	switch p, _ := valueString(prop); {
	case hasHeader && hasProp:
		return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - hash-header and hash-property are mutually exclusive")
	case hasProp && !slices.Contains(hashProperties, p):
		return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - Unsupported property: "+p)
	}
	return nil
}

// pickBinding checks a new binding of a picking exchange as RabbitMQ's
// validate_binding does (406): a consistent-hash binding key is its
// weight, an integer in 1..MaxHashWeight; a local-random binding has an
// empty key and a classic queue for destination.
func pickBinding(v *vhost, x *exchange, dest string, toExchange bool, key string) *proto.Result {
	switch x.typ {
	case ConsistentHashType:
		if _, err := hashWeight(key); err != nil {
			return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - "+err.Error())
		}
	case LocalRandomType:
		if key != "" {
			return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - Non empty binding '"+key+"' key not permitted")
		}
		if toExchange {
			return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - Destination not found")
		}
		if q, ok := v.queues[dest]; ok {
			if t, ok := tableGet(q.args, "x-queue-type"); ok {
				if name, _ := valueString(t); name == "quorum" {
					return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - Queue type rabbit_quorum_queue not valid for this exchange type")
				}
			}
		}
	}
	return nil
}

// hashWeight reads a consistent-hash binding key as the plugin does
// (Erlang's list_to_integer: an optional sign and decimal digits).
func hashWeight(key string) (int64, error) {
	n, err := strconv.ParseInt(key, 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(key, "-"):
		n = MaxHashWeight + 1
	case errors.Is(err, strconv.ErrRange):
		n = 0
	case err != nil:
		return 0, errors.New("The binding key must be an integer: " + erlBinary(key))
	}
	switch {
	case n < 1:
		return 0, errors.New("The binding key must be greater than 0")
	case n > MaxHashWeight:
		return 0, errors.New("The binding key must not exceed " + strconv.Itoa(MaxHashWeight))
	}
	return n, nil
}

// erlBinary is how RabbitMQ's texts print a binary (~tp).
func erlBinary(s string) string { return "<<" + strconv.Quote(s) + ">>" }

// ring is what a picking exchange routes with, derived from its bindings
// (the state) and rebuilt after any of them changes: not state, so a
// replica that replayed the log and one restored from a snapshot, which
// both hold the bindings in insertion order, route alike.
type ring struct {
	to []*binding
	// end: for a consistent-hash exchange, the cumulative weights, so
	// that to[i] owns buckets [end[i-1], end[i]).
	end []int64
}

// ringOf builds x's ring when a message first needs it.
//
//   - x-consistent-hash: each destination owns as many consecutive
//     buckets as its first binding's weight, in binding order, as the
//     plugin's ring grows: a second binding of one destination adds none.
//   - x-modulus-hash: every binding, sorted as RabbitMQ sorts the
//     destinations (exchanges before queues, then by name), so that the
//     order is the same whatever order the bindings were made in.
//   - x-local-random: the bindings to queues, in binding order.
func (x *exchange) ringOf() *ring {
	if x.ring != nil {
		return x.ring
	}
	r := &ring{}
	switch x.typ {
	case ConsistentHashType:
		seen := map[string]bool{}
		var total int64
		for _, b := range x.bindings {
			w, err := hashWeight(b.key)
			k := destKey(b)
			if err != nil || seen[k] {
				continue
			}
			seen[k] = true
			total += w
			r.to = append(r.to, b)
			r.end = append(r.end, total)
		}
	case ModulusHashType:
		r.to = slices.Clone(x.bindings)
		slices.SortStableFunc(r.to, func(a, b *binding) int {
			if a.toExchange != b.toExchange {
				if a.toExchange {
					return -1
				}
				return 1
			}
			return strings.Compare(a.dest, b.dest)
		})
	case LocalRandomType:
		for _, b := range x.bindings {
			if !b.toExchange {
				r.to = append(r.to, b)
			}
		}
	}
	x.ring = r
	return r
}

func destKey(b *binding) string {
	if b.toExchange {
		return "e" + b.dest
	}
	return "q" + b.dest
}

// pick is the binding a picking exchange routes a message to, nil for
// none. Every input is the log's: the message, the bindings, and for
// x-local-random the position of the command being applied.
func (s *state) pick(x *exchange, keys []string, props *proto.Properties) *binding {
	r := x.ringOf()
	if len(r.to) == 0 {
		return nil
	}
	switch x.typ {
	case ConsistentHashType:
		b := jump(hashOn(x.args, keys, props), r.end[len(r.end)-1])
		i, _ := slices.BinarySearch(r.end, b+1)
		return r.to[i]
	case ModulusHashType:
		h := newHash()
		for _, k := range keys {
			h.str(k)
		}
		return r.to[h.sum()%uint64(len(r.to))]
	case LocalRandomType:
		return r.to[s.draw()%uint64(len(r.to))]
	}
	return nil
}

// drawCount counts the draws of the command at index, pos.
type drawCount struct {
	index uint64
	pos   uint32
	n     uint64
}

// draw is x-local-random's choice: RabbitMQ draws at random, but every
// replica must pick alike, so it is a hash of the entry's index, the
// command's position in it and how many draws the command made before
// (a dead-lettering or a release may route several messages).
func (s *state) draw() uint64 {
	d := &s.draws
	if d.index != s.index || d.pos != s.pos {
		d.index, d.pos, d.n = s.index, s.pos, 0
	}
	d.n++
	return mix(mix(s.index^uint64(s.pos)<<48) ^ d.n)
}

// hashOn is the hash of what an x-consistent-hash exchange hashes a
// message on: its first routing key, the hash-header header, or the
// hash-property property. A message without the header or the property
// hashes as one value, so all such messages go to one destination, as
// with the plugin.
func hashOn(args *proto.Table, keys []string, props *proto.Properties) uint64 {
	h := newHash()
	if v, ok := tableGet(args, "hash-header"); ok {
		name, _ := valueString(v)
		hv, ok := tableGet(props.GetHeaders(), name)
		if a, isArray := hv.GetKind().(*proto.Value_Array); ok && isArray {
			// The plugin hashes the head of a list.
			if vs := a.Array.GetValues(); len(vs) > 0 {
				hv = vs[0]
			} else {
				h.byte(3)
				return h.sum()
			}
		}
		switch s, isString := valueString(hv); {
		case !ok:
			h.byte(0)
		case isString:
			h.byte(1)
			h.str(s)
		default:
			b, _ := pb.MarshalOptions{Deterministic: true}.Marshal(hv)
			h.byte(2)
			h.str(string(b))
		}
		return h.sum()
	}
	if v, ok := tableGet(args, "hash-property"); ok {
		name, _ := valueString(v)
		var s *string
		if props == nil {
			props = &proto.Properties{}
		}
		switch name {
		case "correlation_id":
			s = props.CorrelationId
		case "message_id":
			s = props.MessageId
		case "timestamp":
			if props.Timestamp != nil {
				t := strconv.FormatInt(*props.Timestamp, 10)
				s = &t
			}
		}
		if s == nil {
			h.byte(0)
		} else {
			h.byte(1)
			h.str(*s)
		}
		return h.sum()
	}
	h.byte(1)
	if len(keys) > 0 {
		h.str(keys[0])
	}
	return h.sum()
}

// jump is Lamping and Veach's jump consistent hash: the bucket in [0, n)
// of key. Adding buckets at the end moves only the keys the new buckets
// take; removing a binding shifts the buckets after it down, as the
// plugin's ring does.
func jump(key uint64, n int64) int64 {
	var b, j int64 = -1, 0
	for j < n {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return b
}

// fnv is 64-bit FNV-1a: routing depends on it, so it must never change.
type fnv uint64

func newHash() *fnv {
	h := fnv(14695981039346656037)
	return &h
}

func (h *fnv) byte(c byte) {
	*h = (*h ^ fnv(c)) * 1099511628211
}

// str hashes s with its length first (4 bytes), so that lists of
// strings hash apart.
func (h *fnv) str(s string) {
	n := uint32(len(s))
	h.byte(byte(n >> 24))
	h.byte(byte(n >> 16))
	h.byte(byte(n >> 8))
	h.byte(byte(n))
	for i := 0; i < len(s); i++ {
		h.byte(s[i])
	}
}

func (h *fnv) sum() uint64 { return mix(uint64(*h)) }

// mix is splitmix64's finalizer: it spreads FNV's output over all bits.
func mix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
