package tokens

import (
	"context"
	"errors"
	"fmt"
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
// skipped); a status other than 200, or a key it cannot read, fails the
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
		return nil, fmt.Errorf("fetching %s: %w", v.jwksURL, err)
	}
	return &jwksKeys{store: store}, nil
}

// all returns the public keys of the JWKS that may verify a signature.
func (k *jwksKeys) all() []any {
	jwks, err := k.store.KeyReadAll(context.Background())
	if err != nil {
		return nil
	}
	keys := make([]any, 0, len(jwks))
	for _, j := range jwks {
		if use := j.Marshal().USE; use == "" || use == jwkset.UseSig {
			keys = append(keys, publicOf(j.Key()))
		}
	}
	return keys
}

// jwksKey finds the key of kid, fetching the JWKS again when it lacks kid
// (see unknownKID), and checks that it may verify method: a key for
// signatures, of the kind of method, whose own alg (when the JWKS gives
// one) is method.
func (v *Verifier) jwksKey(ctx context.Context, keys *jwksKeys, kid, method string) (any, *Refusal) {
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
		return nil, unauthorized("kid", "kid: no key of the JWKS (--jwt-jwks-url) has kid %q", clip(kid))
	}
	m := j.Marshal()
	if m.USE != "" && m.USE != jwkset.UseSig {
		return nil, unauthorized("kid", "kid: the key %q of the JWKS is for %q, not for signatures", clip(kid), m.USE)
	}
	key := publicOf(j.Key())
	if m.ALG != "" && string(m.ALG) != method {
		return nil, unauthorized("alg", "alg: the key %q of the JWKS is for %s, not %q", clip(kid), m.ALG, method)
	}
	if !fits(key, method) {
		return nil, unauthorized("alg", "alg: the key %q of the JWKS is an %s key, which does not verify %q", clip(kid), keyKind(key), method)
	}
	return key, nil
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
			"flag", "--jwt-jwks-url", "why", why, "error", err)
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
