// Package wait is the tests' one way to wait for something that happens
// on its own time (a goroutine, a connection, another process): poll a
// condition until it holds, and fail the test, saying what it waited for,
// when it does not within a bound. Every bound is generous: a loaded CI
// machine is slow, and a test that works never reaches it.
package wait

import (
	"testing"
	"time"
)

// Until polls cond every 5 ms until it holds, and fails t when it does
// not within d.
func Until(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
