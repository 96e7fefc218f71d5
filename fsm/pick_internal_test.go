package fsm

import (
	"fmt"
	"math"
	"math/rand"
	"strconv"
	"testing"
)

// Property: for random weights, each destination of a consistent-hash
// exchange gets the share of keys its weight says, within two points;
// a modulus-hash exchange gives each binding an equal share and
// local random each bound queue an equal share of the draws.
func TestPickSharesFollowWeights(t *testing.T) {
	const keys = 40000
	for seed := int64(1); seed <= 12; seed++ {
		r := rand.New(rand.NewSource(seed))
		ws := make([]int, 2+r.Intn(5))
		total := 0
		for i := range ws {
			ws[i] = 1 + r.Intn(40)
			total += ws[i]
		}
		s := &state{}
		for _, typ := range []string{ConsistentHashType, ModulusHashType, LocalRandomType} {
			x := &exchange{typ: typ}
			expect := map[string]float64{}
			for i, w := range ws {
				q := "q" + strconv.Itoa(i)
				switch typ {
				case ConsistentHashType:
					x.bindings = append(x.bindings, &binding{dest: q, key: strconv.Itoa(w)})
					expect[q] = float64(w) / float64(total)
				default:
					x.bindings = append(x.bindings, &binding{dest: q})
					expect[q] = 1 / float64(len(ws))
				}
			}
			got := map[string]int{}
			for k := 0; k < keys; k++ {
				s.index = uint64(k)
				got[s.pick(x, []string{fmt.Sprintf("key-%d-%d", seed, k)}, nil).dest]++
			}
			for q, want := range expect {
				if share := float64(got[q]) / keys; math.Abs(share-want) > 0.02 {
					t.Errorf("seed %d, %s, weights %v: %s got %.3f of the keys, want %.3f", seed, typ, ws, q, share, want)
				}
			}
		}
	}
}
