package wire

import (
	"bufio"
	"bytes"
	"testing"
)

func TestFrameBuffered_OnlyAWholeFrame(t *testing.T) {
	frame := []byte{FrameMethod, 0, 1, 0, 0, 0, 3, 'a', 'b', 'c', FrameEnd}
	huge := []byte{FrameBody, 0, 1, 0xff, 0xff, 0xff, 0xff, 'x'}
	cases := []struct {
		name string
		in   []byte
		want bool
	}{
		{"nothing", nil, false},
		{"part of the header", frame[:FrameHeaderSize-1], false},
		{"the header", frame[:FrameHeaderSize], false},
		{"all but the end octet", frame[:len(frame)-1], false},
		{"the frame", frame, true},
		{"the frame and part of the next", append(append([]byte{}, frame...), frame[:3]...), true},
		{"a size past any buffer", huge, false},
	}
	for _, c := range cases {
		r := bufio.NewReaderSize(bytes.NewReader(c.in), 64)
		if len(c.in) > 0 {
			_, _ = r.Peek(1) // fill the buffer
		}
		if got := FrameBuffered(r); got != c.want {
			t.Errorf("%s: FrameBuffered %v, want %v", c.name, got, c.want)
		}
	}
}
