package replycode

import "testing"

func TestReplyCodes(t *testing.T) {
	want := map[uint16]int{ReplySuccess: 200, AccessRefused: 403, NotFound: 404, ResourceLocked: 405,
		PreconditionFailed: 406, FrameError: 501, CommandInvalid: 503, ChannelError: 504,
		UnexpectedFrame: 505, NotAllowed: 530, NotImplemented: 540, InternalError: 541}
	for got, w := range want {
		if int(got) != w {
			t.Errorf("%d != %d", got, w)
		}
	}
}
