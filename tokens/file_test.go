package tokens

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/mcpp/gateway/wire"
)

// TestFileRepeated: a token file that gives one token twice, as token
// or as token_sha256 (in either case of hex), is refused, naming both
// entries and never the token.
func TestFileRepeated(t *testing.T) {
	const token = "s3cr3t-repeated"
	sum := sha256.Sum256([]byte(token))
	hexSum := hex.EncodeToString(sum[:])
	entry := func(key, value, participant string) string {
		return `{"` + key + `": "` + value + `", "participant": "` + participant + `", "pods": ["*"]}`
	}
	for name, entries := range map[string][]string{
		"token twice":           {entry("token", token, "alice"), entry("token", "other", "carol"), entry("token", token, "bob")},
		"token and its sha256":  {entry("token", token, "alice"), entry("token", "other", "carol"), entry("token_sha256", hexSum, "bob")},
		"sha256 twice":          {entry("token_sha256", hexSum, "alice"), entry("token", "other", "carol"), entry("token_sha256", strings.ToUpper(hexSum), "bob")},
		"sha256, then as token": {entry("token_sha256", hexSum, "alice"), entry("token", "other", "carol"), entry("token", token, "bob")},
	} {
		_, err := parseFile([]byte(`{"tokens": [` + strings.Join(entries, ", ") + `]}`))
		if err == nil {
			t.Errorf("%s: the file was accepted", name)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, "entry 2 (participant bob) repeats the token of entry 0 (participant alice)") {
			t.Errorf("%s: %q does not name the entries", name, msg)
		}
		if strings.Contains(msg, token) || strings.Contains(strings.ToLower(msg), hexSum) {
			t.Errorf("%s: %q quotes the token", name, msg)
		}
	}
	// The same participant with two tokens is fine.
	if _, err := parseFile([]byte(`{"tokens": [` + entry("token", "a", "alice") + `, ` + entry("token", "b", "alice") + `]}`)); err != nil {
		t.Errorf("two tokens of one participant: %v", err)
	}
}

// TestFileBroken: each mistake of a token file stops New, and the error
// names the flag and the entry, never the token.
func TestFileBroken(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct{ file, want string }{
		"not JSON":            {`{"tokens": [`, "not a valid token file: unexpected end of JSON input"},
		"neither":             {`{"tokens": [{"participant": "alice", "pods": ["*"]}]}`, "entry 0 has neither token nor token_sha256"},
		"both":                {`{"tokens": [{"token": "tok-both", "token_sha256": "00", "participant": "alice", "pods": ["*"]}]}`, "entry 0 has both token and token_sha256"},
		"bad sha256":          {`{"tokens": [{"token_sha256": "abc", "participant": "alice", "pods": ["*"]}]}`, "entry 0: token_sha256 must be 64 hex digits"},
		"bad participant":     {`{"tokens": [{"token": "tok-bad", "participant": "al ice", "pods": ["*"]}]}`, `entry 0: participant "al ice" is not a valid participant id`},
		"system: participant": {`{"tokens": [{"token": "tok-sys", "participant": "system:gateway", "pods": ["*"]}]}`, "is not a valid participant id"},
		"no pods":             {`{"tokens": [{"token": "tok-nopods", "participant": "alice"}]}`, "entry 0 (participant alice) lists no pods"},
		"bad capability":      {`{"tokens": [{"token": "tok-cap", "participant": "alice", "pods": ["*"], "capabilities": [{"payload": {}}]}]}`, `needs "kind"`},
	} {
		path := writeFile(t, dir, "tokens.json", c.file)
		_, err := New(context.Background(), Config{File: path})
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "--tokens: ") || !strings.Contains(msg, c.want) || strings.Contains(msg, "tok-") {
			t.Errorf("%s: %q; want --tokens: …%s…, without the token", name, msg, c.want)
		}
	}
	if _, err := New(context.Background(), Config{File: dir + "/missing.json"}); err == nil || !strings.HasPrefix(err.Error(), "--tokens: ") {
		t.Errorf("a missing file: %v", err)
	}
}

// TestFileTokens: a token of the file is its entry's participant, with its
// capabilities (as strings or objects) and pods; the file's tokens never
// expire.
func TestFileTokens(t *testing.T) {
	const hashed = "bot-token"
	sum := sha256.Sum256([]byte(hashed))
	path := writeFile(t, t.TempDir(), "tokens.json", `{"tokens": [
		{"token": "alice-token", "participant": "alice", "capabilities": ["chat", {"kind": "mcp/request", "payload": {"method": "tools/call"}}], "pods": ["*"]},
		{"token_sha256": "`+hex.EncodeToString(sum[:])+`", "participant": "bot", "pods": ["lab", "lab-*"]}
	]}`)
	v := newVerifier(t, Config{File: path})
	if !v.Enabled() {
		t.Fatal("a verifier with a token file says it is not enabled")
	}

	alice := mustVerify(t, v, "alice-token", "anything")
	caps, _ := json.Marshal(alice.Capabilities)
	if alice.Participant != "alice" || alice.Source != SourceFile || !alice.Expires.IsZero() || alice.Pod != "anything" ||
		string(caps) != `["chat",{"kind":"mcp/request","payload":{"method":"tools/call"}}]` ||
		alice.TokenSHA256 != sha256.Sum256([]byte("alice-token")) {
		t.Errorf("alice: %+v, capabilities %s", alice, caps)
	}

	bot := mustVerify(t, v, hashed, "lab-7")
	if bot.Participant != "bot" || len(bot.Capabilities) != 0 || bot.Capabilities == nil || strings.Join(bot.Pods, ",") != "lab,lab-*" {
		t.Errorf("bot: %+v", bot)
	}
	mustVerify(t, v, hashed, "lab")
	r := mustRefuse(t, v, hashed, "other", 403, "pods")
	if !strings.Contains(r.Message, `may not join pod "other"`) {
		t.Errorf("refusal: %q", r.Message)
	}

	if r := mustRefuse(t, v, "nobody-token", "lab", 401, ClaimToken); r.Message != "unknown token" {
		t.Errorf("unknown token: %q", r.Message)
	}
	if r := mustRefuse(t, v, "", "lab", 401, ClaimToken); !strings.Contains(r.Message, "a token is required") {
		t.Errorf("no token: %q", r.Message)
	}
	// A JWT is an unknown token when no JWT key is configured.
	mustRefuse(t, v, sign(t, jwt.SigningMethodHS256, []byte(secret), "", claimsFor(nil)), "lab", 401, ClaimToken)
}

// TestLookupComparesEveryEntry: the lookup of a token compares it with
// every entry of the file, whether it matches the first, the last or
// none, so that the time it takes says nothing of which matched.
func TestLookupComparesEveryEntry(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"tokens": [`)
	for i := range 10 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"token": "token-` + string(rune('a'+i)) + `", "participant": "p` + string(rune('a'+i)) + `", "pods": ["*"]}`)
	}
	b.WriteString(`]}`)
	f, err := parseFile([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	compares := 0
	constantTimeCompare = func(x, y []byte) int {
		compares++
		return defaultCompare(x, y)
	}
	t.Cleanup(func() { constantTimeCompare = defaultCompare })
	for _, c := range []struct {
		token, participant string
	}{{"token-a", "pa"}, {"token-j", "pj"}, {"token-z", ""}} {
		compares = 0
		e, ok := f.lookup(sha256.Sum256([]byte(c.token)))
		if compares != 10 {
			t.Errorf("%s: %d comparisons; want one per entry, 10", c.token, compares)
		}
		if got := ""; ok {
			got = e.participant
			if got != c.participant {
				t.Errorf("%s: found %s; want %s", c.token, got, c.participant)
			}
		} else if c.participant != "" {
			t.Errorf("%s: not found", c.token)
		}
	}
}

var defaultCompare = constantTimeCompare

// TestNotEnabled: with nothing configured the gateway runs open, and no
// token is known.
func TestNotEnabled(t *testing.T) {
	v := newVerifier(t, Config{})
	if v.Enabled() {
		t.Fatal("an empty Config says it is enabled")
	}
	if r := mustRefuse(t, v, "any-token", "lab", 401, ClaimToken); r.Wire() != (wire.Refusal{Code: wire.CodeUnauthorized, Message: "unknown token"}) {
		t.Errorf("refusal: %+v", r.Wire())
	}
}

// TestFileBadCapabilities: a capability that does not compile stops the
// gateway at start (or keeps the old tokens at reload), naming the entry.
func TestFileBadCapabilities(t *testing.T) {
	_, err := parseFile([]byte(`{"tokens": [{"token": "t", "participant": "p", "capabilities": [""], "pods": ["*"]}]}`))
	if err == nil || !strings.Contains(err.Error(), "entry 0 (participant p): capabilities") {
		t.Fatalf("err = %v", err)
	}
}
