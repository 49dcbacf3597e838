package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/coder/websocket"

	"github.com/mcpp/gateway/wire"
)

// Conn is one WebSocket connection to a pod with nothing added: it does
// not wait for the welcome, decode what it reads, fill ids or reconnect.
// Read returns each WebSocket message as the gateway sent it (the welcome
// first; with batch=1 a message holds several envelopes, one per line)
// and Write sends one as it is. It is for a program that handles the
// gateway's bytes itself: a relay, a load generator that must not spend
// its CPU decoding, a test that checks the exact bytes or sends what a
// Client would refuse to. A Client is made of Conns, one per connection.
//
// One goroutine may Read while others Write; Close and CloseNow may be
// called from any.
type Conn struct {
	ws *websocket.Conn
}

// DialConn upgrades to WebSocket at gatewayURL for opts.Pod as Dial
// does, with the same URLs, query (the filter, History, Fold, Resume,
// Protocol) and refusals (a *RefusedError), and returns as soon as the
// gateway accepts the upgrade. Options.Reconnect and Options.EventBuffer
// mean nothing to a Conn. ctx bounds the dial, and so does
// Options.DialTimeout.
func DialConn(ctx context.Context, gatewayURL string, opts Options) (*Conn, error) {
	base, secret, err := baseURL(gatewayURL, &opts)
	if err != nil {
		return nil, err
	}
	if opts.HTTPClient, err = tlsClient(opts.HTTPClient, opts.TLSConfig); err != nil {
		return nil, fmt.Errorf("client: dial pod %s: %w", opts.Pod, err)
	}
	var filter url.Values
	if opts.Filter != nil {
		filter = opts.Filter.Query()
	}
	u := connURL(base, filter, opts.Resume, opts.History, opts.Fold)
	ctx, cancel := context.WithTimeout(ctx, orDefault(opts.DialTimeout, DefaultDialTimeout))
	defer cancel()
	c, err := dialConn(ctx, u, upgradeHeader(&opts), &opts, secret)
	if err != nil {
		return nil, fmt.Errorf("client: dial pod %s: %w", opts.Pod, err)
	}
	return c, nil
}

// orDefault is v, or def when v is not positive.
func orDefault[T ~int64 | ~int](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// upgradeHeader is what every upgrade of opts sends: its headers and its
// token.
func upgradeHeader(opts *Options) http.Header {
	h := opts.HTTPHeader.Clone()
	if h == nil {
		h = http.Header{}
	}
	if opts.Token != "" {
		h.Set("Authorization", "Bearer "+opts.Token)
	}
	return h
}

// connURL is the URL of one connection: base with the filter, what to
// resume after and the history to replay.
func connURL(base *url.URL, filter url.Values, resume string, history int, fold *bool) string {
	u := *base
	q := u.Query()
	for k, v := range filter {
		q[k] = v
	}
	if resume != "" {
		q.Set(wire.QueryResume, resume)
	}
	if history != 0 {
		if history < 0 {
			q.Set(wire.QueryHistory, wire.HistoryAll)
		} else {
			q.Set(wire.QueryHistory, strconv.Itoa(history))
		}
		if fold != nil && !*fold {
			q.Set(wire.QueryFold, "0")
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// dialConn upgrades at u. A refusal is a *RefusedError; other errors hide
// secret, a token the URL's query carried.
func dialConn(ctx context.Context, u string, header http.Header, opts *Options, secret string) (*Conn, error) {
	ws, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{
		HTTPHeader: header,
		HTTPClient: opts.HTTPClient,
	})
	if err != nil {
		if resp != nil && resp.StatusCode != 0 && resp.StatusCode != http.StatusSwitchingProtocols {
			var body []byte
			if resp.Body != nil {
				body, _ = io.ReadAll(io.LimitReader(resp.Body, 1024))
			}
			return nil, refusal(resp.StatusCode, body)
		}
		return nil, redact(err, secret, url.QueryEscape(secret))
	}
	ws.SetReadLimit(orDefault(opts.ReadLimit, DefaultReadLimit))
	return &Conn{ws: ws}, nil
}

// Read appends the next WebSocket message to dst and returns the result:
// Read(ctx, buf[:0]) reuses buf, Read(ctx, nil) returns a new slice. When
// the connection ends, the error is a *ClosedError for a close code of the
// gateway (docs/protocol.md section 5) and wraps ErrDisconnected
// otherwise. A ctx that ends during Read closes the connection, as it does
// in the WebSocket library underneath.
func (c *Conn) Read(ctx context.Context, dst []byte) ([]byte, error) {
	for {
		typ, r, err := c.ws.Reader(ctx)
		if err != nil {
			return dst, closeError(err)
		}
		if typ != websocket.MessageText {
			// The gateway sends none; skip it whole.
			if _, err := io.Copy(io.Discard, r); err != nil {
				return dst, closeError(err)
			}
			continue
		}
		for {
			if len(dst) == cap(dst) {
				dst = append(dst, 0)[:len(dst)]
			}
			n, err := r.Read(dst[len(dst):cap(dst)])
			dst = dst[:len(dst)+n]
			if err == io.EOF {
				return dst, nil
			}
			if err != nil {
				return dst, closeError(err)
			}
		}
	}
}

// Write sends msg as one WebSocket text message, as it is: the gateway
// judges it (docs/protocol.md section 5). A ctx that ends during Write
// closes the connection.
func (c *Conn) Write(ctx context.Context, msg []byte) error {
	if err := c.ws.Write(ctx, websocket.MessageText, msg); err != nil {
		return fmt.Errorf("client: write: %w", err)
	}
	return nil
}

// Close leaves the pod with a normal closure (1000), waiting a little
// for the gateway's answer.
func (c *Conn) Close() error {
	return c.ws.Close(websocket.StatusNormalClosure, "")
}

// CloseNow drops the connection without a closing handshake, as a
// process that dies or a network that fails would.
func (c *Conn) CloseNow() error {
	return c.ws.CloseNow()
}
