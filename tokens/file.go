package tokens

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/wire"
)

// entry is one token of the token file: what it allows, and the SHA-256
// of the token, which is all the gateway keeps of it.
type entry struct {
	participant  string
	capabilities []wire.Capability
	pods         []string
	hash         [sha256.Size]byte
}

// tokenFile is a parsed token file (docs/protocol.md section 1).
type tokenFile struct {
	entries []entry
	// byHash finds an entry by its token's hash for Revoked, which is
	// asked about tokens that were already verified: only Lookup, which
	// sees tokens from the network, must take the same time whatever
	// matches.
	byHash map[[sha256.Size]byte]*entry
}

// fileJSON is the token file as written:
//
//	{"tokens": [{"token": "s3cr3t", "participant": "alice", "capabilities": ["chat"], "pods": ["*"]},
//	            {"token_sha256": "9f86…", "participant": "bot", "pods": ["lab-*"]}]}
type fileJSON struct {
	Tokens []struct {
		Token        string            `json:"token"`
		TokenSHA256  string            `json:"token_sha256"`
		Participant  string            `json:"participant"`
		Capabilities []wire.Capability `json:"capabilities"`
		Pods         []string          `json:"pods"`
	} `json:"tokens"`
}

// parseFile reads the JSON of a token file. Its errors never quote a
// token. A token may appear once (as token or as token_sha256): two
// entries of one token would leave which participant it names to the
// order of the file.
func parseFile(data []byte) (*tokenFile, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("not a valid token file: %w", err)
	}
	t := &tokenFile{
		entries: make([]entry, 0, len(f.Tokens)),
		byHash:  make(map[[sha256.Size]byte]*entry, len(f.Tokens)),
	}
	seen := make(map[[sha256.Size]byte]int, len(f.Tokens))
	for i, e := range f.Tokens {
		g := entry{participant: e.Participant, capabilities: e.Capabilities, pods: e.Pods}
		switch {
		case e.Token != "" && e.TokenSHA256 != "":
			return nil, fmt.Errorf("entry %d has both token and token_sha256", i)
		case e.Token != "":
			g.hash = sha256.Sum256([]byte(e.Token))
		case e.TokenSHA256 != "":
			b, err := hex.DecodeString(strings.TrimSpace(e.TokenSHA256))
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("entry %d: token_sha256 must be 64 hex digits", i)
			}
			copy(g.hash[:], b)
		default:
			return nil, fmt.Errorf("entry %d has neither token nor token_sha256", i)
		}
		if !validParticipant(g.participant) {
			return nil, fmt.Errorf("entry %d: participant %q is not a valid participant id", i, g.participant)
		}
		if len(g.pods) == 0 {
			return nil, fmt.Errorf("entry %d (participant %s) lists no pods", i, g.participant)
		}
		if first, ok := seen[g.hash]; ok {
			return nil, fmt.Errorf("entry %d (participant %s) repeats the token of entry %d (participant %s)",
				i, g.participant, first, f.Tokens[first].Participant)
		}
		seen[g.hash] = i
		if _, err := capability.Compile(g.capabilities); err != nil {
			// Found at start (or reload), not at the participant's join.
			return nil, fmt.Errorf("entry %d (participant %s): capabilities: %w", i, g.participant, err)
		}
		if g.capabilities == nil {
			g.capabilities = []wire.Capability{}
		}
		t.entries = append(t.entries, g)
	}
	for i := range t.entries {
		t.byHash[t.entries[i].hash] = &t.entries[i]
	}
	return t, nil
}

// constantTimeCompare is subtle.ConstantTimeCompare; a test counts its
// calls to check that lookup compares every entry.
var constantTimeCompare = subtle.ConstantTimeCompare

// lookup finds the entry of a presented token by its hash. Every entry is
// compared, in constant time, whatever matches, so the time taken says
// nothing of which entry matched, nor of how much of a hash did.
func (t *tokenFile) lookup(hash [sha256.Size]byte) (*entry, bool) {
	found := -1
	for i := range t.entries {
		if constantTimeCompare(hash[:], t.entries[i].hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil, false
	}
	return &t.entries[found], true
}

// validParticipant reports whether id may name a participant: the
// envelope's rule, less the ids that belong to the gateway.
func validParticipant(id string) bool {
	return envelope.ValidParticipantID(id) && !strings.HasPrefix(id, "system:")
}
