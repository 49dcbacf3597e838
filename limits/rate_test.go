package limits

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/mcpp/gateway/wire"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// drain takes every whole token of l at now and returns how many it took.
func drain(t *testing.T, l *rate.Limiter, now time.Time) int {
	t.Helper()
	n := 0
	for ; n < 1_000_000; n++ {
		if ok, _ := Take(l, now); !ok {
			return n
		}
	}
	t.Fatal("the bucket never ran dry")
	return n
}

func TestTakeBurstThenRefusal(t *testing.T) {
	l := Rate{Per: 10, Burst: 10}.NewLimiter()
	if n := drain(t, l, t0); n != 10 {
		t.Fatalf("a full bucket of burst 10 gave %d tokens at once, want 10", n)
	}
	before := l.TokensAt(t0)
	ok, d := Take(l, t0)
	if ok {
		t.Fatal("an empty bucket gave a token")
	}
	if d <= 0 || d > 100*time.Millisecond {
		t.Fatalf("retry after %v, want in (0, 100ms] (one token at 10/s)", d)
	}
	if d < 99*time.Millisecond {
		t.Fatalf("retry after %v, want about 100ms: the bucket is empty", d)
	}
	if after := l.TokensAt(t0); after != before {
		t.Fatalf("a refused take changed the bucket: %v tokens, then %v", before, after)
	}
	// The delay it gave is enough, and not more than needed.
	if ok, _ := Take(l, t0.Add(d-2*time.Millisecond)); ok {
		t.Fatalf("a token was there before the %v the refusal gave", d)
	}
	if ok, d2 := Take(l, t0.Add(d)); !ok {
		t.Fatalf("no token after the %v the refusal gave (retry after %v more)", d, d2)
	}
}

func TestTakeRefusalsLeaveTheBucketAlone(t *testing.T) {
	l := Rate{Per: 4, Burst: 2}.NewLimiter()
	drain(t, l, t0)
	at := t0.Add(125 * time.Millisecond) // half a token back
	want := l.TokensAt(at)
	if want < 0.49 || want > 0.51 {
		t.Fatalf("%v tokens after 125ms at 4/s, want 0.5", want)
	}
	for i := 0; i < 1000; i++ {
		ok, d := Take(l, at)
		if ok {
			t.Fatalf("take %d: half a token gave a whole one", i)
		}
		if d <= 0 || d > 126*time.Millisecond || d < 124*time.Millisecond {
			t.Fatalf("take %d: retry after %v, want 125ms", i, d)
		}
	}
	if got := l.TokensAt(at); got != want {
		t.Fatalf("1000 refusals moved the bucket from %v to %v tokens", want, got)
	}
	// Refusals are not debts: the token is there when the first refusal said.
	if ok, _ := Take(l, t0.Add(250*time.Millisecond)); !ok {
		t.Fatal("refused takes delayed the next token")
	}
}

// TestTakeConcurrentRefusals: the bucket a replacing connection shares with
// the one it replaces is used by two readers at once. Refusals there must
// not eat tokens (a reservation cancelled after another was made does).
func TestTakeConcurrentRefusals(t *testing.T) {
	for round := 0; round < 10; round++ {
		l := Rate{Per: 1, Burst: 1}.NewLimiter()
		if ok, _ := Take(l, t0); !ok {
			t.Fatal("a full bucket refused")
		}
		at := t0.Add(500 * time.Millisecond)
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 2000; i++ {
					if ok, d := Take(l, at); ok || d <= 0 {
						t.Errorf("half a token: ok %v, retry after %v", ok, d)
						return
					}
				}
			}()
		}
		wg.Wait()
		if got := l.TokensAt(at); got < 0.4999 || got > 0.5001 {
			t.Fatalf("round %d: concurrent refusals left %v tokens, want 0.5", round, got)
		}
	}
}

func TestTakeSlowAndStoppedBuckets(t *testing.T) {
	stopped := rate.NewLimiter(0, 1)
	if ok, _ := Take(stopped, t0); !ok {
		t.Fatal("a zero-rate bucket of burst 1 starts with one token")
	}
	if ok, d := Take(stopped, t0.Add(time.Hour)); ok || d <= 0 {
		t.Fatalf("a zero-rate bucket refilled, or gave retry after %v", d)
	}
	slow := Rate{Per: 1e-12, Burst: 1}.NewLimiter()
	Take(slow, t0)
	if ok, d := Take(slow, t0); ok || d <= 0 || d > maxRetryAfter {
		t.Fatalf("a very slow bucket: ok %v, retry after %v; want a refusal with a positive delay", ok, d)
	}
	inf := rate.NewLimiter(rate.Inf, 0)
	for i := 0; i < 100; i++ {
		if ok, _ := Take(inf, t0); !ok {
			t.Fatal("an infinite rate refused")
		}
	}
}

func TestRateError(t *testing.T) {
	e := RateError(wire.CodeContextRateLimited, 250*time.Millisecond, "context %q", "c1")
	if e.Code != wire.CodeContextRateLimited || e.RetryAfter != 250*time.Millisecond || e.Message != `context "c1"` {
		t.Fatalf("RateError: %+v", e)
	}
	if !e.Code.Retryable() || !wire.CodeRateLimited.Retryable() {
		t.Fatal("rate refusals must be retryable")
	}
}

func TestBucketSetBelongsToTheParticipant(t *testing.T) {
	s := NewBucketSet(Rate{Per: 10, Burst: 10}, Rate{Per: 1, Burst: 3})
	a1 := s.Acquire("alice")
	if a1.Send.Burst() != 10 || a1.Create.Burst() != 3 || float64(a1.Send.Limit()) != 10 || float64(a1.Create.Limit()) != 1 {
		t.Fatalf("buckets do not follow the set's rates: send %v/%d create %v/%d", a1.Send.Limit(), a1.Send.Burst(), a1.Create.Limit(), a1.Create.Burst())
	}
	drain(t, a1.Send, t0)
	// A replacing connection, while the first is still open.
	a2 := s.Acquire("alice")
	if a2 != a1 {
		t.Fatal("a replacing connection got buckets of its own")
	}
	if ok, _ := Take(a2.Send, t0); ok {
		t.Fatal("the replacing connection's bucket is not the drained one")
	}
	if b := s.Acquire("bob"); b == a1 || drain(t, b.Send, t0) != 10 {
		t.Fatal("another participant shares alice's bucket, or starts without a full one")
	}
	s.Release("alice", t0) // the replaced connection ends
	s.Release("alice", t0) // and the new one: alice has left with an empty bucket
	if s.Len() != 2 {
		t.Fatalf("%d participants with buckets, want 2 (alice left with an empty bucket, bob is here)", s.Len())
	}
	// Coming back at once does not refill it.
	a3 := s.Acquire("alice")
	if a3 != a1 {
		t.Fatal("alice came back to fresh buckets")
	}
	if ok, _ := Take(a3.Send, t0.Add(50*time.Millisecond)); ok {
		t.Fatal("reconnecting refilled the bucket")
	}
	s.Release("alice", t0.Add(50*time.Millisecond))

	// Sweep forgets alice once her buckets are full, never bob while here.
	s.Sweep(t0.Add(500 * time.Millisecond))
	if s.Len() != 2 {
		t.Fatalf("%d after a sweep at half refill, want 2", s.Len())
	}
	s.Sweep(t0.Add(5 * time.Second))
	if s.Len() != 1 {
		t.Fatalf("%d after alice's buckets refilled, want 1 (bob)", s.Len())
	}
	s.Sweep(t0.Add(time.Hour))
	if s.Len() != 1 {
		t.Fatal("a present participant's buckets were forgotten")
	}
	if a4 := s.Acquire("alice"); a4 == a1 || drain(t, a4.Send, t0.Add(time.Hour)) != 10 {
		t.Fatal("after being forgotten alice does not start with fresh, full buckets")
	}
}

func TestBucketSetCreateBucketCounts(t *testing.T) {
	s := NewBucketSet(Rate{Per: 100, Burst: 100}, Rate{Per: 1, Burst: 2})
	b := s.Acquire("carol")
	drain(t, b.Create, t0)
	s.Release("carol", t0.Add(time.Second)) // send bucket full, create not
	if s.Len() != 1 {
		t.Fatal("a departed participant with a drained create bucket was forgotten at once")
	}
	s.Sweep(t0.Add(1500 * time.Millisecond))
	if s.Len() != 1 {
		t.Fatal("forgotten before its create bucket refilled")
	}
	s.Sweep(t0.Add(2 * time.Second))
	if s.Len() != 0 {
		t.Fatal("not forgotten once both buckets refilled")
	}
	// A participant that leaves with full buckets is forgotten at once.
	s.Acquire("dave")
	s.Release("dave", t0)
	if s.Len() != 0 {
		t.Fatal("a participant that leaves with full buckets is kept")
	}
}

func TestBucketSetShrinksAndStaysUsable(t *testing.T) {
	s := NewBucketSet(Rate{Per: 10, Burst: 10}, Rate{Per: 10, Burst: 10})
	for i := 0; i < 1000; i++ {
		b := s.Acquire(strconv.Itoa(i))
		Take(b.Send, t0)
	}
	for i := 0; i < 1000; i++ {
		if i%100 != 0 {
			s.Release(strconv.Itoa(i), t0)
		}
	}
	if s.Len() != 1000 {
		t.Fatalf("%d, want 1000: departed drained buckets are kept until refilled", s.Len())
	}
	s.Sweep(t0.Add(time.Second))
	if s.Len() != 10 {
		t.Fatalf("%d after the sweep, want the 10 present", s.Len())
	}
	// The ones present keep their buckets through the rebuild.
	for i := 0; i < 1000; i += 100 {
		b := s.Acquire(strconv.Itoa(i))
		if n := drain(t, b.Send, t0); n != 9 {
			t.Fatalf("participant %d: %d tokens, want the 9 its bucket had", i, n)
		}
	}
}

func TestBucketSetConcurrent(t *testing.T) {
	s := NewBucketSet(Rate{Per: 1000, Burst: 5}, Rate{Per: 1000, Burst: 5})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				id := strconv.Itoa(i % 50)
				now := t0.Add(time.Duration(i) * time.Millisecond)
				b := s.Acquire(id)
				Take(b.Send, now)
				s.Release(id, now)
				if i%100 == 0 {
					s.Sweep(now)
				}
			}
		}()
	}
	wg.Wait()
	s.Sweep(t0.Add(time.Hour))
	if s.Len() != 0 {
		t.Fatalf("%d participants kept after all left and refilled", s.Len())
	}
}
