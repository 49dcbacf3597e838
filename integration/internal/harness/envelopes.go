package harness

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// IDsOf returns the "id" of each object of a JSON array.
func IDsOf(v any) []string {
	list, _ := v.([]any)
	out := []string{}
	for _, e := range list {
		o, _ := e.(map[string]any)
		s, _ := o["id"].(string)
		out = append(out, s)
	}
	return out
}

// JSONEqual compares a decoded JSON value with a Go value by their JSON.
func JSONEqual(got any, want any) bool {
	a, _ := json.Marshal(got)
	var x, y any
	_ = json.Unmarshal(a, &x)
	b, _ := json.Marshal(want)
	_ = json.Unmarshal(b, &y)
	return reflect.DeepEqual(x, y)
}

// SeqOf is the "seq" number of a payload.
func SeqOf(m Msg) int {
	f, ok := m.Payload()["seq"].(float64)
	if !ok {
		return -1
	}
	return int(f)
}

// Pad returns n bytes of filler.
func Pad(n int) string { return strings.Repeat("x", n) }

// EnvelopeOfSize builds an envelope of kind whose JSON text is exactly n
// bytes long (n must be at least 64).
func EnvelopeOfSize(t *testing.T, id, kind string, n int) []byte {
	t.Helper()
	head := fmt.Sprintf(`{"id":%q,"kind":%q,"payload":{"pad":"`, id, kind)
	tail := `"}}`
	fill := n - len(head) - len(tail)
	if fill < 0 {
		t.Fatalf("envelope of %d bytes is too small", n)
	}
	b := []byte(head + Pad(fill) + tail)
	if len(b) != n || !json.Valid(b) {
		t.Fatalf("envelopeOfSize: built %d bytes", len(b))
	}
	return b
}
