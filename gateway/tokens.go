package gateway

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/participant"
)

// Grant is what one token allows.
type Grant struct {
	Participant  string
	Capabilities participant.Capabilities
	Pods         []string
	hash         [sha256.Size]byte
}

// Tokens is a loaded token file (docs/protocol.md section 1).
type Tokens struct {
	grants []Grant
}

type tokenFile struct {
	Tokens []struct {
		Token        string   `json:"token"`
		TokenSHA256  string   `json:"token_sha256"`
		Participant  string   `json:"participant"`
		Capabilities []string `json:"capabilities"`
		Pods         []string `json:"pods"`
	} `json:"tokens"`
}

// LoadTokens reads a token file. It reports, through warn, a file that
// others than its owner may read.
func LoadTokens(path string, warn func(msg string, args ...any)) (*Tokens, error) {
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 && warn != nil {
		warn("token file is readable by others than its owner; chmod 600 it", "path", path, "mode", st.Mode().Perm().String())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	return ParseTokens(data)
}

// ParseTokens reads the JSON of a token file. Its errors never quote a
// token. A token may appear once (as token or as token_sha256): two
// entries of one token would leave which participant it names to the
// order of the file.
func ParseTokens(data []byte) (*Tokens, error) {
	var f tokenFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	t := &Tokens{}
	seen := make(map[[sha256.Size]byte]int, len(f.Tokens))
	for i, e := range f.Tokens {
		g := Grant{Participant: e.Participant, Capabilities: e.Capabilities, Pods: e.Pods}
		switch {
		case e.Token != "" && e.TokenSHA256 != "":
			return nil, fmt.Errorf("token file: entry %d has both token and token_sha256", i)
		case e.Token != "":
			g.hash = sha256.Sum256([]byte(e.Token))
		case e.TokenSHA256 != "":
			b, err := hex.DecodeString(strings.TrimSpace(e.TokenSHA256))
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("token file: entry %d: token_sha256 must be 64 hex digits", i)
			}
			copy(g.hash[:], b)
		default:
			return nil, fmt.Errorf("token file: entry %d has neither token nor token_sha256", i)
		}
		if !envelope.ValidParticipantID(g.Participant) || strings.HasPrefix(g.Participant, "system:") {
			return nil, fmt.Errorf("token file: entry %d: participant %q is not a valid participant id", i, g.Participant)
		}
		if len(g.Pods) == 0 {
			return nil, fmt.Errorf("token file: entry %d (participant %s) lists no pods", i, g.Participant)
		}
		if first, ok := seen[g.hash]; ok {
			return nil, fmt.Errorf("token file: entry %d (participant %s) repeats the token of entry %d (participant %s)",
				i, g.Participant, first, f.Tokens[first].Participant)
		}
		seen[g.hash] = i
		if g.Capabilities == nil {
			g.Capabilities = participant.Capabilities{}
		}
		t.grants = append(t.grants, g)
	}
	return t, nil
}

// Lookup finds the grant of a presented token. Every entry is compared,
// in constant time, whatever matches, so the time taken says nothing of
// which entry matched.
func (t *Tokens) Lookup(token string) (*Grant, bool) {
	h := sha256.Sum256([]byte(token))
	found := -1
	for i := range t.grants {
		if subtle.ConstantTimeCompare(h[:], t.grants[i].hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil, false
	}
	return &t.grants[found], true
}
