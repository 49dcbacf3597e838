package capability_test

import (
	"testing"

	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/wire"
)

// BenchmarkAllows prices a capability check, the one the gateway makes for
// every envelope. Compare the sub-benchmarks of one run:
//
//		go test -run '^$' -bench Allows -count 5 ./capability/ | benchstat -col /check -
//
//	  - reference: the check before this package (participant.Capabilities,
//	    kept in reference_test.go), the baseline;
//	  - plain: the same patterns as a Set, which must cost the same;
//	  - payload-*: a Set that adds a payload pattern (MEW's example), on an
//	    envelope of its kind whose payload matches it (match), does not
//	    (miss), or of a kind no pattern matches (other-kind, where the
//	    payload is not read);
//	  - grants-*: Grants.Allows with one grant in force.
func BenchmarkAllows(b *testing.B) {
	plain := []string{"chat", "mcp/*", "reasoning/*"}
	// Each iteration checks the next of these: allowed by the first
	// pattern, by the last, and by none.
	kinds := []string{"chat", "reasoning/step", "note"}

	b.Run("check=reference", func(b *testing.B) {
		caps := referenceCaps(plain)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			caps.Allows(kinds[i%len(kinds)])
		}
	})
	b.Run("check=plain", func(b *testing.B) {
		s := capability.MustCompile(wire.Kinds(plain...))
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			s.Allows(kinds[i%len(kinds)], nil)
		}
	})

	shaped := capability.MustCompile(append(wire.Kinds("chat", "reasoning/*"), wire.Capability{
		Kind:    "mcp/request",
		Payload: []byte(`{"method": "tools/call", "params": {"name": "read_*"}}`),
	}))
	payloads := map[string]struct {
		kind    string
		payload []byte
		want    bool
	}{
		"payload-match":      {"mcp/request", []byte(`{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "/tmp/notes.txt"}}}`), true},
		"payload-miss":       {"mcp/request", []byte(`{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "write_file", "arguments": {"path": "/tmp/notes.txt"}}}`), false},
		"payload-other-kind": {"note", []byte(`{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "/tmp/notes.txt"}}}`), false},
	}
	for _, name := range []string{"payload-match", "payload-miss", "payload-other-kind"} {
		p := payloads[name]
		b.Run("check="+name, func(b *testing.B) {
			if shaped.Allows(p.kind, p.payload) != p.want {
				b.Fatalf("Allows(%s, %s) != %v", p.kind, p.payload, p.want)
			}
			b.ReportAllocs()
			for b.Loop() {
				shaped.Allows(p.kind, p.payload)
			}
		})
	}

	b.Run("check=grants-plain", func(b *testing.B) {
		var g capability.Grants
		if err := g.Add(capability.Grant{ID: "g1", Grantor: "alice", Capabilities: capability.MustCompile(wire.Kinds(plain...))}); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			g.Allows(kinds[i%len(kinds)], nil, capability.Where{Context: "task", Ancestors: []string{"root"}})
		}
	})
	b.Run("check=grants-payload-match", func(b *testing.B) {
		var g capability.Grants
		if err := g.Add(capability.Grant{ID: "g1", Grantor: "alice", Context: "root", Capabilities: shaped}); err != nil {
			b.Fatal(err)
		}
		p := payloads["payload-match"]
		if !g.Allows(p.kind, p.payload, capability.Where{Context: "task", Ancestors: []string{"root"}}) {
			b.Fatal("not allowed")
		}
		b.ReportAllocs()
		for b.Loop() {
			g.Allows(p.kind, p.payload, capability.Where{Context: "task", Ancestors: []string{"root"}})
		}
	})
}
