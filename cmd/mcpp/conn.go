package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coder/websocket"
)

const (
	defaultGateway = "ws://127.0.0.1:8080"
	dialTimeout    = 10 * time.Second
	readLimit      = 64 << 20 // a batch holds at most 256 KiB, an envelope 2 MiB
)

const connectionUsage = `Connection flags (every command):
  --gateway URL       the gateway: ws://HOST:PORT, or the /ws URL itself;
                      http(s):// means ws(s)://, and /ws is appended to a
                      URL whose path does not end in /ws
                      (default $MCPP_GATEWAY, else ` + defaultGateway + `)
  --pod NAME          the pod to join (default $MCPP_POD; required)
  --participant ID    your participant id in open mode (default
                      $MCPP_PARTICIPANT, else the gateway makes one up); a
                      second connection with the same id replaces the first
  --token TOKEN       sent as Authorization: Bearer TOKEN (default $MCPP_TOKEN)
`

// connFlags are the flags every command takes to reach a pod.
type connFlags struct {
	gateway     string
	token       string
	pod         string
	participant string
}

func (c *connFlags) register(fs *flag.FlagSet, e *env) {
	gw := e.getenv("MCPP_GATEWAY")
	if gw == "" {
		gw = defaultGateway
	}
	fs.StringVar(&c.gateway, "gateway", gw, "")
	fs.StringVar(&c.token, "token", e.getenv("MCPP_TOKEN"), "")
	fs.StringVar(&c.pod, "pod", e.getenv("MCPP_POD"), "")
	fs.StringVar(&c.participant, "participant", e.getenv("MCPP_PARTICIPANT"), "")
}

// check reports what is missing from the connection flags, as a usage
// error, before anything is dialed.
func (c *connFlags) check() error {
	if c.pod == "" {
		return usagef("--pod is required (or set MCPP_POD)")
	}
	_, err := c.url(nil)
	return err
}

// gatewayURL normalizes --gateway into the URL of the WebSocket endpoint.
func gatewayURL(s string) (*url.URL, error) {
	if !strings.Contains(s, "://") {
		s = "ws://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return nil, usagef("--gateway %q is not a URL like %s", s, defaultGateway)
	}
	switch u.Scheme {
	case "ws", "wss":
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return nil, usagef("--gateway %q: the scheme must be ws, wss, http or https", s)
	}
	p := strings.TrimSuffix(u.Path, "/")
	if !strings.HasSuffix(p, "/ws") {
		p += "/ws"
	}
	u.Path, u.RawPath = p, ""
	u.Fragment = ""
	return u, nil
}

// url is the upgrade URL with the pod, the participant and extra query
// parameters (a filter) added to whatever query --gateway has.
func (c *connFlags) url(extra url.Values) (string, error) {
	u, err := gatewayURL(c.gateway)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("pod", c.pod)
	if c.participant != "" {
		q.Set("participant", c.participant)
	}
	for k, vs := range extra {
		q[k] = vs
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// refusalError is an upgrade the gateway answered with an HTTP error.
type refusalError struct {
	status int
	body   string // the gateway's JSON body, as sent
}

func (r *refusalError) Error() string {
	var b struct{ Error, Message string }
	code := ""
	if json.Unmarshal([]byte(r.body), &b) == nil && b.Error != "" {
		code = " " + b.Error
	}
	body := strings.TrimSpace(r.body)
	if body == "" {
		body = "(no body)"
	}
	return fmt.Sprintf("the gateway refused the connection (HTTP %d%s): %s", r.status, code, body)
}

// dial joins the pod with the extra query parameters.
func (c *connFlags) dial(ctx context.Context, extra url.Values) (*websocket.Conn, error) {
	u, err := c.url(extra)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	conn, resp, err := websocket.Dial(dctx, u, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			var body bytes.Buffer
			if resp.Body != nil {
				_, _ = body.ReadFrom(resp.Body)
			}
			return nil, &refusalError{status: resp.StatusCode, body: body.String()}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("cannot reach the gateway at %s: %v", redact(u), err)
	}
	conn.SetReadLimit(readLimit)
	return conn, nil
}

// redact hides a token given in the URL's query.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return s
	}
	q := u.Query()
	if q.Has("token") {
		q.Set("token", "REDACTED")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// quietQuery is the filter of a connection that only sends and wants its
// answers: nothing broadcast, only what is addressed to it.
func quietQuery() url.Values {
	return url.Values{"main": {"0"}, "contexts": {"none"}, "routing": {"directed"}}
}

// closeError describes how the gateway ended a connection.
func closeError(err error) error {
	switch code := websocket.CloseStatus(err); code {
	case -1:
		return fmt.Errorf("connection lost: %v", err)
	case websocket.StatusGoingAway:
		return errors.New("the gateway closed the connection: it is shutting down (1001)")
	case 4000:
		return errors.New("the gateway closed the connection: another connection joined with the same participant id (4000 replaced)")
	case 4008:
		return errors.New("the gateway closed the connection: this client read too slowly (4008 slow consumer)")
	case websocket.StatusMessageTooBig:
		return errors.New("the gateway closed the connection: a message was too large (1009)")
	default:
		var ce websocket.CloseError
		errors.As(err, &ce)
		return fmt.Errorf("the gateway closed the connection (%d %s)", int(code), ce.Reason)
	}
}

// header is the part of a received envelope the client looks at.
type header struct {
	ID            string          `json:"id"`
	Kind          string          `json:"kind"`
	CorrelationID json.RawMessage `json:"correlation_id"`
	Payload       json.RawMessage `json:"payload"`
}

func parseHeader(line []byte) (header, bool) {
	var h header
	err := json.Unmarshal(line, &h)
	return h, err == nil
}

// correlates reports whether h's correlation_id (a string or an array of
// strings) names id.
func (h *header) correlates(id string) bool {
	var one string
	if json.Unmarshal(h.CorrelationID, &one) == nil {
		return one == id
	}
	var many []string
	if json.Unmarshal(h.CorrelationID, &many) == nil {
		for _, s := range many {
			if s == id {
				return true
			}
		}
	}
	return false
}

// correlationIDs returns h's correlation ids.
func (h *header) correlationIDs() []string {
	var one string
	if json.Unmarshal(h.CorrelationID, &one) == nil {
		return []string{one}
	}
	var many []string
	_ = json.Unmarshal(h.CorrelationID, &many)
	return many
}

// gatewayError is the payload of system/error.
type gatewayError struct {
	Error        string `json:"error"`
	Message      string `json:"message"`
	Retryable    bool   `json:"retryable"`
	RetryAfterMS int64  `json:"retry_after_ms"`
}

func (g gatewayError) String() string {
	s := g.Error + ": " + g.Message
	if g.RetryAfterMS > 0 {
		s += fmt.Sprintf(" (retry after %d ms)", g.RetryAfterMS)
	}
	return s
}

// splitLines splits a WebSocket message into its envelopes (one, or
// several with batch=1), dropping empty lines.
func splitLines(data []byte) [][]byte {
	var out [][]byte
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		line = bytes.TrimRight(line, "\r")
		if len(bytes.TrimSpace(line)) > 0 {
			out = append(out, line)
		}
	}
	return out
}

// newID returns a random UUIDv4 for an envelope id.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// request is a connection used to send envelopes and collect the
// gateway's answers: it reads in the background and hands every envelope
// received to handle, in order, on the reading goroutine.
type request struct {
	conn     *websocket.Conn
	done     chan struct{}
	err      error         // why reading stopped; set before done closes
	welcomed chan struct{} // closed when the welcome has come
	welcome  header        // set before welcomed closes
}

func startRequest(conn *websocket.Conn, handle func(line []byte)) *request {
	r := &request{conn: conn, done: make(chan struct{}), welcomed: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			typ, data, err := conn.Read(context.Background())
			if err != nil {
				r.err = err
				return
			}
			if typ != websocket.MessageText {
				continue
			}
			for _, line := range splitLines(data) {
				if h, ok := parseHeader(line); ok && h.Kind == "system/welcome" {
					select {
					case <-r.welcomed:
					default:
						r.welcome = h
						close(r.welcomed)
					}
				}
				handle(line)
			}
		}
	}()
	return r
}

// waitWelcome waits for the welcome, the first message of a connection:
// the commands write nothing before it, so that they know they have
// joined (and the gateway's limits).
func (r *request) waitWelcome(ctx context.Context) error {
	t := time.NewTimer(dialTimeout)
	defer t.Stop()
	select {
	case <-r.welcomed:
		return nil
	case <-r.done:
		return closeError(r.err)
	case <-t.C:
		return errors.New("no welcome from the gateway")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// write sends one envelope.
func (r *request) write(ctx context.Context, b []byte) error {
	wctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	if err := r.conn.Write(wctx, websocket.MessageText, b); err != nil {
		select {
		case <-r.done:
			return closeError(r.err)
		default:
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("write: %v", err)
	}
	return nil
}

// close ends the connection politely and waits for the reader.
func (r *request) close() {
	_ = r.conn.Close(websocket.StatusNormalClosure, "")
	<-r.done
}
