package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// TestTokensRepeated: a token file that gives one token twice, as token
// or as token_sha256 (in either case of hex), is refused, naming both
// entries and never the token.
func TestTokensRepeated(t *testing.T) {
	const secret = "s3cr3t-repeated"
	sum := sha256.Sum256([]byte(secret))
	hexSum := hex.EncodeToString(sum[:])
	entry := func(key, value, participant string) string {
		return `{"` + key + `": "` + value + `", "participant": "` + participant + `", "pods": ["*"]}`
	}
	for name, entries := range map[string][]string{
		"token twice":           {entry("token", secret, "alice"), entry("token", "other", "carol"), entry("token", secret, "bob")},
		"token and its sha256":  {entry("token", secret, "alice"), entry("token", "other", "carol"), entry("token_sha256", hexSum, "bob")},
		"sha256 twice":          {entry("token_sha256", hexSum, "alice"), entry("token", "other", "carol"), entry("token_sha256", strings.ToUpper(hexSum), "bob")},
		"sha256, then as token": {entry("token_sha256", hexSum, "alice"), entry("token", "other", "carol"), entry("token", secret, "bob")},
	} {
		_, err := ParseTokens([]byte(`{"tokens": [` + strings.Join(entries, ", ") + `]}`))
		if err == nil {
			t.Errorf("%s: the file was accepted", name)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, "entry 2 (participant bob) repeats the token of entry 0 (participant alice)") {
			t.Errorf("%s: %q does not name the entries", name, msg)
		}
		if strings.Contains(msg, secret) || strings.Contains(strings.ToLower(msg), hexSum) {
			t.Errorf("%s: %q quotes the token", name, msg)
		}
	}
	// The same participant with two tokens is fine.
	if _, err := ParseTokens([]byte(`{"tokens": [` + entry("token", "a", "alice") + `, ` + entry("token", "b", "alice") + `]}`)); err != nil {
		t.Errorf("two tokens of one participant: %v", err)
	}
}
