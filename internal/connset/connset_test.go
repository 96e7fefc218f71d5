package connset

import (
	"net"
	"testing"
)

func pipe(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	return a, b
}

// A connection closed by its user leaves the set; Close ends the rest,
// and a connection added after Close is closed at once.
func TestSet_CloseEndsWhatIsKept(t *testing.T) {
	var s Set
	a, peerA := pipe(t)
	b, peerB := pipe(t)
	ka, ok := s.Add(a)
	kb, ok2 := s.Add(b)
	if !ok || !ok2 || s.Len() != 2 {
		t.Fatalf("added: %v %v, kept %d", ok, ok2, s.Len())
	}
	if err := ka.Close(); err != nil || s.Len() != 1 {
		t.Fatalf("closed by its user: %v, kept %d", err, s.Len())
	}
	s.Close()
	if s.Len() != 0 {
		t.Fatalf("kept %d after Close", s.Len())
	}
	buf := make([]byte, 1)
	if _, err := peerB.Read(buf); err == nil {
		t.Fatal("the kept connection is still open after Close")
	}
	_ = kb
	c, peerC := pipe(t)
	if kc, ok := s.Add(c); ok || kc != nil {
		t.Fatal("a connection was kept after Close")
	}
	if _, err := peerC.Read(buf); err == nil {
		t.Fatal("a connection added after Close is still open")
	}
	_ = peerA
}
