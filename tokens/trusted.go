package tokens

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"slices"
)

// Trusted is what a verifier trusts at one moment, named without a
// secret, so that what a reload changed can be told (the gateway's audit
// trail does): the entries of the token file and the keys JWTs are
// verified with.
type Trusted struct {
	// Entries are the token file's: each participant and its token's
	// SHA-256.
	Entries []Entry
	// Keys name the JWT keys: "hmac:HASH" for the secret, "key:HASH" for
	// a public key of the file (HASH: the first 16 hex digits of the
	// SHA-256 of the secret, or of the key's DER), "jwks:KID" for a key
	// of the JWKS. Sorted.
	Keys []string
}

// Entry is one entry of the token file, as Trusted names it.
type Entry struct {
	Participant string
	TokenSHA256 [sha256.Size]byte
}

// Trusted reports what the verifier trusts now.
func (v *Verifier) Trusted() Trusted {
	s := v.state.Load()
	var t Trusted
	if s.file != nil {
		for _, e := range s.file.entries {
			t.Entries = append(t.Entries, Entry{Participant: e.participant, TokenSHA256: e.hash})
		}
	}
	if s.secret != nil {
		t.Keys = append(t.Keys, "hmac:"+shortHash(s.secret))
	}
	for _, k := range s.publicKeys {
		if der, err := x509.MarshalPKIXPublicKey(k); err == nil {
			t.Keys = append(t.Keys, "key:"+shortHash(der))
		}
	}
	if s.jwks != nil {
		if all, err := s.jwks.store.KeyReadAll(context.Background()); err == nil {
			for _, j := range all {
				if forSignatures(j) {
					t.Keys = append(t.Keys, "jwks:"+clip(j.Marshal().KID))
				}
			}
		}
	}
	slices.Sort(t.Keys)
	return t
}

func shortHash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
