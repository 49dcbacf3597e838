package participant

import "testing"

func TestCapabilities(t *testing.T) {
	cases := []struct {
		caps  Capabilities
		kind  string
		allow bool
	}{
		{Capabilities{"*"}, "chat", true},
		{Capabilities{"*"}, "system/welcome", false},
		{Capabilities{"system/*"}, "system/error", false},
		{Capabilities{"mcp/*"}, "mcp/request:tools/call", true},
		{Capabilities{"mcp/*"}, "mcpx/request", false},
		{Capabilities{"mcp/request:*"}, "mcp/request:tools/call", true},
		{Capabilities{"mcp/request:*"}, "mcp/response:tools/call", false},
		{Capabilities{"mcp/request:tools/*"}, "mcp/request:tools/list", true},
		{Capabilities{"chat"}, "chat", true},
		{Capabilities{"chat"}, "chat/x", false},
		{Capabilities{"chat"}, "cha", false},
		{Capabilities{}, "chat", false},
		{nil, "chat", false},
		{Capabilities{"mcp/proposal:*", "chat"}, "chat", true},
		{Capabilities{"mcp/proposal:*", "chat"}, "mcp/proposal:tools/call", true},
		{Capabilities{"mcp/proposal:*", "chat"}, "mcp/request:tools/call", false},
	}
	for _, c := range cases {
		if got := c.caps.Allows(c.kind); got != c.allow {
			t.Errorf("%v.Allows(%q) = %v, want %v", c.caps, c.kind, got, c.allow)
		}
	}
}

func TestMatchAnyPods(t *testing.T) {
	if !MatchAny([]string{"lab-*"}, "lab-1") || MatchAny([]string{"lab-*"}, "lab") || !MatchAny([]string{"lab"}, "lab") || !MatchAny([]string{"*"}, "x") {
		t.Fatal("pod patterns do not match like capabilities")
	}
}

func TestCapabilityAllowsDoesNotAllocate(t *testing.T) {
	caps := Capabilities{"mcp/proposal:*", "chat", "mcp/request:tools/*"}
	if n := testing.AllocsPerRun(1000, func() { caps.Allows("mcp/request:tools/call") }); n != 0 {
		t.Fatalf("Allows allocates %v times", n)
	}
}

func BenchmarkCapabilityAllows(b *testing.B) {
	caps := Capabilities{"mcp/proposal:*", "chat", "mcp/request:tools/*"}
	b.ReportAllocs()
	for b.Loop() {
		caps.Allows("mcp/request:tools/call")
	}
}

func FuzzMatch(f *testing.F) {
	f.Add("mcp/*", "mcp/request")
	f.Add("*", "")
	f.Add("chat", "chat")
	f.Fuzz(func(t *testing.T, pattern, kind string) {
		got := Match(pattern, kind)
		if pattern == kind && got != true {
			t.Fatalf("Match(%q, %q) is false for an exact pattern", pattern, kind)
		}
		if pattern == "*" && !got {
			t.Fatal("* does not match")
		}
		if got && len(pattern) > 0 && pattern[len(pattern)-1] != '*' && pattern != kind {
			t.Fatalf("Match(%q, %q) is true", pattern, kind)
		}
	})
}

func TestQueueBounded(t *testing.T) {
	q := newQueue(3, 0)
	for i := 0; i < 3; i++ {
		if !q.Push([]byte{byte(i)}, false) {
			t.Fatalf("push %d refused", i)
		}
	}
	if q.Push([]byte{9}, false) {
		t.Fatal("a full queue accepted more")
	}
	got := q.PopUpTo(nil, 10, 1<<20)
	if len(got) != 3 || got[0][0] != 0 || got[2][0] != 2 {
		t.Fatalf("popped %v", got)
	}
	q.Close()
	if q.Push([]byte{1}, true) {
		t.Fatal("a closed queue accepted more")
	}
}

func TestQueueBoundedInBytes(t *testing.T) {
	q := newQueue(100, 10)
	// One message is always let in, however large: an envelope over the
	// byte bound must not cut a reader that reads.
	if !q.Push(make([]byte, 25), false) {
		t.Fatal("a first message over the byte bound was refused")
	}
	if q.Push([]byte{1}, false) {
		t.Fatal("the queue holds 25 of 10 bytes and accepted more")
	}
	q.PopUpTo(nil, 10, 1<<20)
	for i := 0; i < 5; i++ {
		if !q.Push([]byte{1, 2}, false) {
			t.Fatalf("push %d (of 2 bytes, %d queued) refused", i, 2*i)
		}
	}
	if q.Push([]byte{3}, false) {
		t.Fatal("10 bytes queued, and 1 more was accepted")
	}
	if n, b := q.Size(); n != 5 || b != 10 {
		t.Fatalf("size %d messages, %d bytes; want 5, 10", n, b)
	}
	q.PopUpTo(nil, 2, 1<<20)
	if n, b := q.Size(); n != 3 || b != 6 || !q.Push([]byte{1, 2, 3, 4}, false) {
		t.Fatalf("after popping 2: %d messages, %d bytes, and 4 more bytes refused", n, b)
	}
}

func TestQueueDrainTakesAnswersOnly(t *testing.T) {
	q := newQueue(10, 0)
	q.Drain()
	if q.Push([]byte{1}, false) {
		t.Fatal("a draining queue took a delivery")
	}
	if !q.Push([]byte{2}, true) {
		t.Fatal("a draining queue refused an answer")
	}
	q.Close()
	if q.Push([]byte{3}, true) {
		t.Fatal("a closed queue took an answer")
	}
}
