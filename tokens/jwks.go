package tokens

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/MicahParks/jwkset"
)

// jwksKeys are the keys of one fetch of the JWKS. A later fetch makes new
// jwksKeys and swaps them in: a key that left the JWKS is then unknown to
// new verifications, while identities verified with it keep their exp.
type jwksKeys struct {
	store jwkset.Storage
}

// fetchJWKS fetches the JWKS once and reads its keys. jwkset fetches and
// parses it (RSA, EC, OKP Ed25519 keys; keys of unsupported kinds are
// skipped) with v.client (jwksClient: no redirect, at most MaxJWKSBytes);
// a status other than 200, a redirect, a larger answer, a key it cannot
// read, or keys for signatures that all fall short (checkKeys) fail the
// fetch.
func (v *Verifier) fetchJWKS(ctx context.Context) (*jwksKeys, error) {
	ctx, cancel := context.WithTimeout(ctx, JWKSTimeout)
	defer cancel()
	// With no RefreshInterval, jwkset fetches once, here, and starts no
	// goroutine: the verifier decides when to fetch again.
	store, err := jwkset.NewStorageFromHTTP(v.cfg.JWKSURL, jwkset.HTTPClientStorageOptions{
		Client:      v.client,
		Ctx:         ctx,
		HTTPTimeout: JWKSTimeout,
	})
	if err != nil {
		// A redirect or an answer too large says all there is to say;
		// what the library and net/http wrap around it does not.
		var answer *jwksAnswerError
		if errors.As(err, &answer) {
			err = answer
		}
		return nil, fmt.Errorf("fetching %s: %w", v.jwksURL, err)
	}
	keys := &jwksKeys{store: store}
	if err := v.checkKeys(ctx, keys); err != nil {
		return nil, fmt.Errorf("fetching %s: %w", v.jwksURL, err)
	}
	return keys, nil
}

// forSignatures reports whether a key of the JWKS is meant to verify
// signatures: its use is "sig", or not given.
func forSignatures(j jwkset.JWK) bool {
	use := j.Marshal().USE
	return use == "" || use == jwkset.UseSig
}

// checkJWKSKey holds a key of the JWKS to the minimums of a key file's
// (checkPublicKey). A JWKS may also hold symmetric (oct) keys: those are
// never used, since an HMAC secret comes from --jwt-secret-file alone, and
// one that a JWKS publishes is no secret.
func checkJWKSKey(key any) error {
	if _, ok := key.([]byte); ok {
		return errors.New("a symmetric (oct) key, which is never used: HMAC secrets come from --jwt-secret-file only")
	}
	return checkPublicKey(key)
}

// checkKeys finds the keys for signatures of a fetched JWKS that fall
// short of checkJWKSKey. They are not used (all and jwksKey leave them
// out) and are logged; when every key for signatures falls short, the
// fetch fails, as a key file of such keys stops the gateway. A JWKS
// without keys for signatures (none yet, or only keys for encryption) is
// not a failed fetch.
func (v *Verifier) checkKeys(ctx context.Context, keys *jwksKeys) error {
	all, err := keys.store.KeyReadAll(ctx)
	if err != nil {
		return err
	}
	var refused []string
	usable := 0
	for _, j := range all {
		if !forSignatures(j) {
			continue
		}
		if err := checkJWKSKey(publicOf(j.Key())); err != nil {
			refused = append(refused, fmt.Sprintf("key %q: %v", clip(j.Marshal().KID), err))
			continue
		}
		usable++
	}
	switch {
	case len(refused) == 0:
	case usable == 0:
		return fmt.Errorf("no key of the JWKS may verify a JWT: %s", strings.Join(refused, "; "))
	default:
		v.log.Warn("keys of the JWKS fall short of the minimums and are not used",
			"flag", v.jwksFlag, "url", v.jwksURL, "keys", strings.Join(refused, "; "))
	}
	return nil
}

// all returns the public keys of the JWKS that may verify a signature.
func (k *jwksKeys) all() []any {
	jwks, err := k.store.KeyReadAll(context.Background())
	if err != nil {
		return nil
	}
	keys := make([]any, 0, len(jwks))
	for _, j := range jwks {
		if key := publicOf(j.Key()); forSignatures(j) && checkJWKSKey(key) == nil {
			keys = append(keys, key)
		}
	}
	return keys
}

// jwksKey finds the key of kid, fetching the JWKS again when it lacks kid
// (see unknownKID), and checks that it may verify method: a key for
// signatures, that meets the minimums (checkJWKSKey), of the kind of
// method, whose own alg (when the JWKS gives one) is method. known is
// false when the JWKS has no key of kid.
func (v *Verifier) jwksKey(ctx context.Context, keys *jwksKeys, kid, method string) (key any, r *Refusal, known bool) {
	j, err := keys.store.KeyRead(ctx, kid)
	if errors.Is(err, jwkset.ErrKeyNotFound) {
		// keys may be older than those in use: a fetch may have ended
		// since this verification began. Fetch only when it has not.
		fresh := v.state.Load().jwks
		if fresh == keys {
			fresh = v.unknownKID(ctx)
		}
		if fresh != nil && fresh != keys {
			j, err = fresh.store.KeyRead(ctx, kid)
		}
	}
	if err != nil {
		return nil, unauthorized("kid", "kid: no key of the JWKS (%s) has kid %q", v.jwksFlag, clip(kid)), false
	}
	m := j.Marshal()
	if !forSignatures(j) {
		return nil, unauthorized("kid", "kid: the key %q of the JWKS is for %q, not for signatures", clip(kid), m.USE), true
	}
	key = publicOf(j.Key())
	if err := checkJWKSKey(key); err != nil {
		return nil, unauthorized("kid", "kid: the key %q of the JWKS is not used: %v", clip(kid), err), true
	}
	if m.ALG != "" && string(m.ALG) != method {
		return nil, unauthorized("alg", "alg: the key %q of the JWKS is for %s, not %q", clip(kid), m.ALG, method), true
	}
	if !fits(key, method) {
		return nil, unauthorized("alg", "alg: the key %q of the JWKS is an %s key, which does not verify %q", clip(kid), keyKind(key), method), true
	}
	return key, nil, true
}

// clip shortens a value taken from a token before a refusal quotes it.
func clip(s string) string {
	const most = 64
	if len(s) > most {
		return s[:most] + "…"
	}
	return s
}

// jwksFetch is a fetch of the JWKS under way for an unknown kid; those who
// come while it runs wait for it.
type jwksFetch struct {
	done chan struct{}
	keys *jwksKeys // nil when the fetch failed
}

// unknownKID fetches the JWKS again because a token names a kid it lacks,
// perhaps a key added since the last fetch. At most one such fetch runs at
// a time, and at most one starts per UnknownKIDInterval: a token that
// comes in between is checked against the keys in use, without a fetch.
// It returns the keys in use afterwards, or nil when the fetch failed.
func (v *Verifier) unknownKID(ctx context.Context) *jwksKeys {
	v.kidMu.Lock()
	f := v.kidFetch
	if f == nil {
		if !v.kidLimiter.Allow() {
			v.kidMu.Unlock()
			// A fetch may have ended since the caller looked.
			return v.state.Load().jwks
		}
		f = &jwksFetch{done: make(chan struct{})}
		v.kidFetch = f
		v.kidMu.Unlock()
		// The fetch is not the caller's: a caller that leaves must not
		// cut it short for the others who wait.
		f.keys = v.swapJWKS(context.WithoutCancel(ctx), "a token names a kid that the JWKS lacks")
		v.kidMu.Lock()
		v.kidFetch = nil
		v.kidMu.Unlock()
		close(f.done)
		return f.keys
	}
	v.kidMu.Unlock()
	select {
	case <-f.done:
		return f.keys
	case <-ctx.Done():
		return nil
	}
}

// swapJWKS fetches the JWKS and puts its keys in use, keeping the rest of
// what the verifier trusts. A failed fetch keeps the keys it had, and is
// logged with why the fetch was made.
func (v *Verifier) swapJWKS(ctx context.Context, why string) *jwksKeys {
	keys, err := v.fetchJWKS(ctx)
	if err != nil {
		v.log.Warn("the JWKS could not be fetched again; its previous keys stay in use",
			"flag", v.jwksFlag, "why", why, "error", err)
		return nil
	}
	v.reloadMu.Lock()
	defer v.reloadMu.Unlock()
	s := *v.state.Load()
	s.jwks = keys
	v.state.Store(&s)
	return keys
}

// refreshJWKS fetches the JWKS every interval until ctx ends.
func (v *Verifier) refreshJWKS(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			v.swapJWKS(ctx, "the periodic refresh")
		}
	}
}
