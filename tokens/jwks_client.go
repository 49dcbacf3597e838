package tokens

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
)

// How the JWKS is fetched. jwkset sends the request, checks the status
// and reads the keys; the client it is given refuses what jwkset would
// otherwise take: a redirect, which would let whoever answers for the
// JWKS's address choose another server to take the keys from, and an
// answer over MaxJWKSBytes, which jwkset would read whole into memory.

// jwksAnswerError is an answer of the JWKS's server that is not read: a
// redirect, or one over MaxJWKSBytes. It is the whole reason of the
// failed fetch.
type jwksAnswerError struct{ reason string }

func (e *jwksAnswerError) Error() string { return e.reason }

// jwksClient returns a copy of base (nil: a client with JWKSTimeout) that
// follows no redirect and reads at most MaxJWKSBytes of an answer. base
// is left as it was: it may be shared with the rest of the program. An
// OAuth issuer's metadata is fetched by such a client too, for the same
// reasons. what names the document in errors ("a JWKS"), and fix says what
// to do about a redirect ("give --jwt-jwks-url the address that serves
// the JWKS").
func jwksClient(base *http.Client, what, fix string) *http.Client {
	c := &http.Client{Timeout: JWKSTimeout}
	if base != nil {
		*c = *base
	}
	c.CheckRedirect = func(req *http.Request, _ []*http.Request) error {
		return &jwksAnswerError{fmt.Sprintf("the answer is a redirect (%s, to %s), which is not followed: %s",
			req.Response.Status, req.URL.Redacted(), fix)}
	}
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	c.Transport = boundedTransport{next: next, what: what}
	return c
}

// boundedTransport reads each answer's body whole, up to MaxJWKSBytes,
// before handing it on: a longer one is an error, whether or not it said
// its length, and however little of it a JSON decoder would have read.
type boundedTransport struct {
	next http.RoundTripper
	what string // "a JWKS", "an issuer's metadata"
}

func (t boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	tooLarge := &jwksAnswerError{fmt.Sprintf("the answer is larger than 1 MiB (%d bytes), the most the gateway reads of %s", MaxJWKSBytes, t.what)}
	if resp.ContentLength > MaxJWKSBytes {
		return nil, tooLarge
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxJWKSBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > MaxJWKSBytes {
		return nil, tooLarge
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	return resp, nil
}
