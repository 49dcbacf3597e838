package gateway

import (
	"net"
	"testing"
)

// TestTokensInClear is the start warning's decision for addresses a test
// cannot listen on everywhere (IPv6, a machine's own address): tokens are
// in the clear on a plain listener whose address is not loopback.
func TestTokensInClear(t *testing.T) {
	tcp := func(s string) net.Addr { a, _ := net.ResolveTCPAddr("tcp", s); return a }
	for _, tc := range []struct {
		addr          net.Addr
		tlsOn, tokens bool
		want          bool
	}{
		{tcp("0.0.0.0:8080"), false, true, true},
		{tcp("[::]:8080"), false, true, true},
		{tcp("192.0.2.7:8080"), false, true, true},
		{tcp("[2001:db8::1]:8080"), false, true, true},
		{tcp("127.0.0.1:8080"), false, true, false},
		{tcp("127.1.2.3:8080"), false, true, false},
		{tcp("[::1]:8080"), false, true, false},
		{&net.UnixAddr{Name: "/run/mcpp.sock", Net: "unix"}, false, true, false},
		{tcp("0.0.0.0:8080"), true, true, false},   // TLS
		{tcp("0.0.0.0:8080"), false, false, false}, // open mode: no tokens to lose
	} {
		if got := tokensInClear(tc.addr, tc.tlsOn, tc.tokens); got != tc.want {
			t.Errorf("tokensInClear(%v, tls %v, tokens %v) = %v, want %v", tc.addr, tc.tlsOn, tc.tokens, got, tc.want)
		}
	}
}
