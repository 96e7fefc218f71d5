package ops

import (
	"context"
	"strings"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// ---- virtual host limits ----

// SetVhostLimits answers raftmq.v1.Admin's SetVhostLimits: a VhostLimits
// command, once every limit named is one raftmq knows.
func (s *Service) SetVhostLimits(ctx context.Context, req *proto.SetVhostLimitsRequest) (*proto.SetVhostLimitsResponse, error) {
	for _, l := range req.GetSet() {
		if !fsm.KnownLimit(l.GetName()) {
			return nil, unknownLimit(l.GetName())
		}
	}
	for _, n := range req.GetClear() {
		if !fsm.KnownLimit(n) {
			return nil, unknownLimit(n)
		}
	}
	if _, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_VhostLimits{VhostLimits: &proto.VhostLimits{
		Vhost: orDefaultVhost(req.GetVhost()), Replace: req.GetReplace(), Set: req.GetSet(), Clear: req.GetClear(),
	}}}); err != nil {
		return nil, err
	}
	return &proto.SetVhostLimitsResponse{}, nil
}

func unknownLimit(name string) error {
	return fail(Invalid, "unknown vhost limit %q: the limits are %s", name, strings.Join(fsm.LimitNames, " and "))
}

// ListVhostLimits answers raftmq.v1.Admin's ListVhostLimits.
func (s *Service) ListVhostLimits(ctx context.Context, req *proto.ListVhostLimitsRequest) (*proto.ListVhostLimitsResponse, error) {
	return read(ctx, s, req.GetConsistent(), req, proto.AdminClient.ListVhostLimits, func(st State) *proto.ListVhostLimitsResponse {
		return &proto.ListVhostLimitsResponse{Vhosts: st.VhostLimits(req.GetVhost())}
	})
}

// PeerConnections counts the connections to vhost that the other alive
// members report (their ListConnections, local), each within the peer
// timeout: a member that does not answer is not counted. This node's own
// connections are its AMQP server's to count.
func (s *Service) PeerConnections(ctx context.Context, vhost string) int {
	n := 0
	askPeers(ctx, s, "count vhost connections", func(ctx context.Context, c proto.AdminClient) (*proto.ListConnectionsResponse, error) {
		return c.ListConnections(ctx, &proto.ListConnectionsRequest{Local: true})
	}, func(_ string, r *proto.ListConnectionsResponse) {
		for _, c := range r.GetConnections() {
			if c.GetVhost() == vhost {
				n++
			}
		}
	})
	return n
}
