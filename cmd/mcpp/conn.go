package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/wire"
)

const (
	defaultGateway = "ws://127.0.0.1:8080"
	dialTimeout    = 10 * time.Second
)

const connectionUsage = `Connection flags (every command):
  --gateway URL       the gateway: ws://HOST:PORT, or the /ws URL itself;
                      http(s):// means ws(s)://, and /ws is appended to a
                      URL whose path does not end in /ws
                      (default $MCPP_GATEWAY, else ` + defaultGateway + `)
  --pod NAME          the pod (default $MCPP_POD; required)
  --participant ID    your participant id in open mode (default
                      $MCPP_PARTICIPANT). tail joins the pod over WebSocket:
                      without an id the gateway makes one up, and a second
                      connection with the same id replaces the first. send,
                      contexts and history do not join: they POST to
                      /pods/NAME/envelopes (nobody sees a join or a leave),
                      and without an id they use a new anon-XXXXXXXXXXXX
  --token TOKEN       sent as Authorization: Bearer TOKEN (default $MCPP_TOKEN)
  --ca-file FILE      for a wss:// or https:// gateway: trust the CA
                      certificates in FILE (PEM) besides the system's roots
                      (default $MCPP_CA_FILE; the system's roots are read
                      from SSL_CERT_FILE or SSL_CERT_DIR when set)
`

// connFlags are the flags every command takes to reach a pod.
type connFlags struct {
	gateway     string
	token       string
	pod         string
	participant string
	caFile      string
	// httpClient makes every request (the upgrade, the POSTs) when
	// --ca-file is given, with the system's roots and the file's CAs;
	// nil is the client package's default. check sets it.
	httpClient *http.Client
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
	fs.StringVar(&c.caFile, "ca-file", e.getenv("MCPP_CA_FILE"), "")
}

// check reports what is missing from the connection flags, as a usage
// error, before anything is dialed.
func (c *connFlags) check() error {
	if c.pod == "" {
		return usagef("--pod is required (or set MCPP_POD)")
	}
	if _, err := c.url(nil); err != nil {
		return err
	}
	if c.caFile != "" {
		roots, err := trustedRoots(c.caFile)
		if err != nil {
			return usagef("--ca-file: %v", err)
		}
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		c.httpClient = &http.Client{Transport: t}
	}
	return nil
}

// trustedRoots is the system's roots plus the CA certificates of the PEM
// file at path.
func trustedRoots(path string) (*x509.CertPool, error) {
	pemData, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool() // a system without roots: the file's alone
	}
	if !roots.AppendCertsFromPEM(pemData) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return roots, nil
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
	if err := wire.AsWebSocket(u); err != nil {
		return nil, usagef("--gateway: %v", err)
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

// endpoint is --gateway as the client package takes it: the /ws URL, with
// whatever query --gateway has (a token, for one).
func (c *connFlags) endpoint() string {
	u, err := gatewayURL(c.gateway)
	if err != nil {
		return c.gateway // check has refused it already
	}
	return u.String()
}

// dial joins the pod with opts (pod, participant and token are the
// flags').
func (c *connFlags) dial(ctx context.Context, opts client.Options) (*client.Client, error) {
	opts.Pod, opts.Participant, opts.Token = c.pod, c.participant, c.token
	opts.DialTimeout = dialTimeout
	if c.httpClient != nil {
		opts.HTTPClient = c.httpClient
	}
	cl, err := client.Dial(ctx, c.endpoint(), opts)
	if err != nil {
		return nil, c.explain(ctx, err, "connection")
	}
	return cl, nil
}

// publishOptions are the options of the commands that POST to
// /pods/NAME/envelopes instead of joining. Open mode needs a participant
// id there (the gateway makes none up, as it does for an upgrade): one is
// made up when --participant is not given. With a token file the token
// names the participant and the id is ignored.
func (c *connFlags) publishOptions() client.PublishOptions {
	if c.participant == "" {
		c.participant = "anon-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	}
	return client.PublishOptions{Pod: c.pod, Participant: c.participant, Token: c.token, HTTPClient: c.httpClient}
}

// explain turns an error of the client package into what mcpp says: a
// refusal with the gateway's JSON body, as it sent it; an interruption as
// itself; anything else as a gateway that could not be reached. what is
// "connection" (an upgrade) or "request" (a POST).
func (c *connFlags) explain(ctx context.Context, err error, what string) error {
	var re *client.RefusedError
	switch {
	case errors.As(err, &re):
		return errors.New(refusalText(re, what))
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("no answer from the gateway in time: %v", err)
	case errors.As(err, new(x509.UnknownAuthorityError)):
		return fmt.Errorf("cannot reach the gateway: %v (when a private CA signed its certificate, give that CA with --ca-file)", err)
	}
	return fmt.Errorf("cannot reach the gateway: %v", err) // the client's error names the URL, without a token
}

// refusalText is an HTTP refusal as mcpp prints it: the status, the code,
// and the gateway's JSON body ({"error":…,"message":…}).
func refusalText(re *client.RefusedError, what string) string {
	body := strings.TrimSpace(re.Message)
	code := ""
	if re.Code != "" {
		code = " " + string(re.Code)
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(wire.Refusal{Code: re.Code, Message: re.Message})
		body = strings.TrimSpace(b.String())
	}
	if body == "" {
		body = "(no body)"
	}
	return fmt.Sprintf("the gateway refused the %s (HTTP %d%s): %s", what, re.StatusCode, code, body)
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

// withTimeout bounds ctx by d; 0 does not.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}
