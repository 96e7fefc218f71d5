package client

import (
	"context"
	"testing"
)

// The credentials a client sends are the ones the node reads back.
func TestBasicCredentials_RoundTrip(t *testing.T) {
	md, err := BasicCredentials{Username: "ops", Password: "p:w"}.GetRequestMetadata(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	user, password, ok := ParseBasic(md[AuthorizationKey])
	if !ok || user != "ops" || password != "p:w" {
		t.Fatalf("read back %q %q %v from %q", user, password, ok, md[AuthorizationKey])
	}
	for _, bad := range []string{"", "Bearer x", "Basic !!", "Basic bm9jb2xvbg=="} {
		if _, _, ok := ParseBasic(bad); ok {
			t.Errorf("%q read as credentials", bad)
		}
	}
}

// TLS needs the CA, and a certificate needs its key.
func TestTLS_Refusals(t *testing.T) {
	if _, err := TLS("", "", ""); err == nil {
		t.Error("TLS without a CA")
	}
	if _, err := Dial("127.0.0.1:1", Security{CertFile: "c.pem"}); err == nil {
		t.Error("a certificate without a CA")
	}
}
