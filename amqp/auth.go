package amqp

import (
	"context"
	"crypto/tls"
	"time"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/internal/replycode"
)

// tlsHandshake completes the TLS handshake of a connection accepted on a
// TLS listener within HandshakeTimeout and records the client's verified
// certificate, if it presented one: its subject CN is the user of the
// EXTERNAL mechanism.
func (c *conn) tlsHandshake(tc *tls.Conn) error {
	ctx, cancel := context.WithTimeout(c.ctx, c.srv.cfg.HandshakeTimeout)
	defer cancel()
	_ = tc.SetDeadline(time.Now().Add(c.srv.cfg.HandshakeTimeout))
	if err := tc.HandshakeContext(ctx); err != nil {
		return err
	}
	_ = tc.SetDeadline(time.Time{})
	st := tc.ConnectionState()
	// VerifiedChains is only set when the certificate chained to the
	// configured client CA (tls-verify optional or required).
	if len(st.VerifiedChains) > 0 && len(st.PeerCertificates) > 0 {
		c.certVerified = true
		c.certUser = st.PeerCertificates[0].Subject.CommonName
	}
	c.logp.Store(c.logger().With("tls", tlsVersionName(st.Version)))
	return nil
}

func tlsVersionName(v uint16) string {
	switch v {
	case tls.VersionTLS12:
		return "1.2"
	case tls.VersionTLS13:
		return "1.3"
	}
	return "?"
}

// mechanisms lists the SASL mechanisms offered in connection.start:
// EXTERNAL only to a client that presented a verified certificate, as
// RabbitMQ's rabbitmq_auth_mechanism_ssl does.
func (c *conn) mechanisms() string {
	if c.certVerified {
		return "EXTERNAL PLAIN AMQPLAIN"
	}
	return "PLAIN AMQPLAIN"
}

// authenticate checks the client's credentials and returns its user, or
// the 403 ACCESS_REFUSED that closes the connection.
func (c *conn) authenticate(mechanism, response string) (string, *wire.Error) {
	refused := func(user, why string) *wire.Error {
		c.logger().Warn("authentication failed", "user", user, "mechanism", mechanism, "reason", why)
		return wire.ConnError(replycode.AccessRefused, 10, 11, "Login was refused using authentication mechanism %s. For details see the broker logfile.", mechanism)
	}
	guestRemote := func(user string) *wire.Error {
		c.logger().Warn("guest refused from a remote address", "user", user)
		return wire.ConnError(replycode.AccessRefused, 10, 11, "Login was refused using authentication mechanism %s. User 'guest' can only connect via localhost", mechanism)
	}
	if mechanism == "EXTERNAL" {
		// The response (an authorization identity) is ignored: the user is
		// the certificate's subject CN and must exist.
		if !c.certVerified {
			return "", refused("", "no verified client certificate")
		}
		user := c.certUser
		switch {
		case user == "":
			return "", refused("", "the client certificate has no subject CN")
		case user == "guest" && !isLoopback(c.nc.RemoteAddr()):
			return "", guestRemote(user)
		case !c.srv.node().UserExists(user):
			return "", refused(user, "no such user")
		}
		return user, nil
	}
	user, pass, err := credentials(mechanism, response)
	if err != nil {
		return "", wire.ConnError(replycode.AccessRefused, 10, 11, "%v", err)
	}
	if user == "guest" && !isLoopback(c.nc.RemoteAddr()) {
		return "", guestRemote(user)
	}
	if _, ok := c.srv.node().Authenticate(user, pass); !ok {
		return "", refused(user, "wrong user or password")
	}
	return user, nil
}
