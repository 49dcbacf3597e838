package tokens

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

const twoTokens = `{"tokens": [
	{"token": "alice-token", "participant": "alice", "pods": ["*"]},
	{"token": "bob-token", "participant": "bob", "pods": ["*"]},
	{"token": "carol-token", "participant": "carol", "pods": ["lab", "lab-*"]},
	{"token": "dave-token", "participant": "dave", "pods": ["*"]}
]}`

// TestReloadRevokes: after a reload, the identities of tokens that the
// file no longer has, that it gives to another participant, or whose pods
// no longer allow their pod are revoked; the others are not; and the
// removed token is refused from then on.
func TestReloadRevokes(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "tokens.json", twoTokens)
	v := newVerifier(t, Config{File: path, JWTSecretFile: writeFile(t, dir, "jwt.secret", secret)})
	alice := mustVerify(t, v, "alice-token", "lab")
	bob := mustVerify(t, v, "bob-token", "lab")
	carol := mustVerify(t, v, "carol-token", "lab-2")
	carolElsewhere := mustVerify(t, v, "carol-token", "lab")
	dave := mustVerify(t, v, "dave-token", "lab")
	jwtAlice := mustVerify(t, v, sign(t, jwt.SigningMethodHS256, []byte(secret), "", claimsFor(nil)), "lab")
	for _, id := range []*Identity{alice, bob, carol, dave, jwtAlice} {
		if v.Revoked(id) {
			t.Fatalf("%s is revoked before any reload", id.Participant)
		}
	}

	writeFile(t, dir, "tokens.json", `{"tokens": [
		{"token": "alice-token", "participant": "alice", "capabilities": ["chat"], "pods": ["*"]},
		{"token": "carol-token", "participant": "carol", "pods": ["lab"]},
		{"token": "dave-token", "participant": "david", "pods": ["*"]}
	]}`)
	if err := v.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id      *Identity
		why     string
		revoked bool
	}{
		{alice, "kept (its capabilities changed)", false},
		{bob, "removed from the file", true},
		{carol, "its pods no longer allow lab-2", true},
		{carolElsewhere, "its pods still allow lab", false},
		{dave, "now names david", true},
		{jwtAlice, "a JWT", false},
	} {
		if v.Revoked(c.id) != c.revoked {
			t.Errorf("%s (%s): revoked %v; want %v", c.id.Participant, c.why, !c.revoked, c.revoked)
		}
	}
	mustRefuse(t, v, "bob-token", "lab", 401, ClaimToken)
	if id := mustVerify(t, v, "alice-token", "lab"); capsJSON(id.Capabilities) != `["chat"]` {
		t.Errorf("alice's capabilities after the reload: %s", capsJSON(id.Capabilities))
	}
}

// TestReloadBroken: a reload that fails keeps everything as it was, and
// its error names each flag at fault.
func TestReloadBroken(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "tokens.json", twoTokens)
	secretPath := writeFile(t, dir, "jwt.secret", secret)
	keyPath := writeFile(t, dir, "key.pem", pemPublic(t, &ecKey().PublicKey))
	v := newVerifier(t, Config{File: path, JWTSecretFile: secretPath, JWTPublicKeyFile: keyPath})
	bob := mustVerify(t, v, "bob-token", "lab")
	hs := sign(t, jwt.SigningMethodHS256, []byte(secret), "", claimsFor(nil))
	es := sign(t, jwt.SigningMethodES256, ecKey(), "", claimsFor(nil))

	writeFile(t, dir, "tokens.json", `{"tokens": [{"token": "alice-token", "participant": "alice", "pods": ["*"]}`) // cut short
	writeFile(t, dir, "jwt.secret", "short")
	err := v.Reload(context.Background())
	if err == nil {
		t.Fatal("the broken files were accepted")
	}
	if msg := err.Error(); !strings.Contains(msg, "--tokens: ") || !strings.Contains(msg, "--jwt-secret-file: ") || strings.Contains(msg, "--jwt-public-key-file") {
		t.Errorf("error %q; want --tokens and --jwt-secret-file named, and only them", msg)
	}
	if v.Revoked(bob) {
		t.Error("bob is revoked by a reload that failed")
	}
	mustVerify(t, v, "bob-token", "lab")
	mustVerify(t, v, hs, "lab")
	mustVerify(t, v, es, "lab")

	// A key file that breaks alone keeps the old key too.
	writeFile(t, dir, "tokens.json", twoTokens)
	writeFile(t, dir, "jwt.secret", secret)
	writeFile(t, dir, "key.pem", "")
	if err := v.Reload(context.Background()); err == nil || !strings.HasPrefix(err.Error(), "--jwt-public-key-file: ") {
		t.Errorf("Reload: %v", err)
	}
	mustVerify(t, v, es, "lab")
}

// TestReloadSecret: a new secret refuses the tokens of the old from then
// on, but revokes none that were verified.
func TestReloadSecret(t *testing.T) {
	dir := t.TempDir()
	v := newVerifier(t, Config{JWTSecretFile: writeFile(t, dir, "jwt.secret", secret)})
	old := sign(t, jwt.SigningMethodHS256, []byte(secret), "", claimsFor(nil))
	id := mustVerify(t, v, old, "lab")
	const newSecret = "a-new-secret-of-more-than-32-bytes!"
	writeFile(t, dir, "jwt.secret", newSecret+"\n")
	if err := v.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	mustRefuse(t, v, old, "lab", 401, ClaimSignature)
	mustVerify(t, v, sign(t, jwt.SigningMethodHS256, []byte(newSecret), "", claimsFor(nil)), "lab")
	if v.Revoked(id) {
		t.Error("a JWT is revoked by a reload")
	}
}

// TestWatch: a changed token file is reloaded without a SIGHUP; one that
// changes into something broken is reported once, and the verifier keeps
// what it had until the file is mended. The file is replaced whole (as
// editors and config tools do), except at the end: the watcher could see
// a file edited in place half written, and report it before the rest.
func TestWatch(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "tokens.json", twoTokens)
	v := newVerifier(t, Config{File: path})
	bob := mustVerify(t, v, "bob-token", "lab")

	var mu sync.Mutex
	var results []error
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		v.Watch(ctx, 10*time.Millisecond, func(err error) {
			mu.Lock()
			results = append(results, err)
			mu.Unlock()
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitFor := func(n int) []error {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			mu.Lock()
			got := append([]error(nil), results...)
			mu.Unlock()
			if len(got) >= n {
				return got
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("%d reloads after 5 s; want %d", len(results), n)
		return nil
	}

	time.Sleep(50 * time.Millisecond) // the file unchanged: no reload
	if got := waitFor(0); len(got) != 0 {
		t.Fatalf("reloads of an unchanged file: %v", got)
	}
	replaceFile(t, path, strings.Replace(twoTokens, `{"token": "bob-token", "participant": "bob", "pods": ["*"]},`, "", 1))
	if got := waitFor(1); got[0] != nil {
		t.Fatalf("reload: %v", got[0])
	}
	if !v.Revoked(bob) {
		t.Error("bob is not revoked after his token left the file")
	}

	replaceFile(t, path, "{")
	if got := waitFor(2); got[1] == nil || !strings.HasPrefix(got[1].Error(), "--tokens: ") {
		t.Fatalf("reload of a broken file: %v", got[1])
	}
	time.Sleep(100 * time.Millisecond) // ten checks of the broken file
	if got := waitFor(2); len(got) != 2 {
		t.Errorf("the broken file was reported %d times; want once", len(got)-1)
	}
	mustVerify(t, v, "alice-token", "lab")

	// Edited in place, as `cat > tokens.json` does: the last reload is
	// of the whole file, whatever it saw half written before.
	writeFile(t, dir, "tokens.json", twoTokens)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, r := v.Verify(context.Background(), "bob-token", "lab"); r == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bob's token, back in the file, is still refused after 5 s: %v", waitFor(0))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := waitFor(3); got[len(got)-1] != nil {
		t.Errorf("the last reload: %v", got[len(got)-1])
	}
}

// replaceFile replaces a file whole, by renaming a new one onto it.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path+".new", []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}
