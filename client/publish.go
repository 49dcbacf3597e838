package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/uuid"

	"github.com/mcpp/gateway/wire"
)

// PublishOptions says which pod Publish, PublishRaw and Ask write to, and
// as whom.
type PublishOptions struct {
	// Pod is the pod to publish to (required).
	Pod string
	// Participant is the sender's id in open mode (a gateway without a
	// token file). There the gateway requires one to publish: unlike an
	// upgrade, a publish request without it is refused with 400
	// wire.CodeInvalidParticipant rather than given a made-up id. With a
	// token file the token names the participant and this is ignored.
	Participant string
	// Token is sent as Authorization: Bearer TOKEN.
	Token string
	// HTTPHeader is added to the request.
	HTTPHeader http.Header
	// HTTPClient makes the request; nil is http.DefaultClient. The
	// request is bounded by the context given to Publish and by the
	// client's Timeout.
	HTTPClient *http.Client
	// TLSConfig checks an https:// (or wss://) gateway's certificate, as
	// Options.TLSConfig does, with HTTPClient nil. Each call then makes
	// its own connection: a program that publishes often gives an
	// HTTPClient whose transport has the TLS configuration instead, and
	// keeps its connections.
	TLSConfig *tls.Config
	// ReadLimit is the largest answer read (default DefaultReadLimit).
	ReadLimit int64
}

// Publish sends envelopes to a pod without joining it, with one POST
// /pods/NAME/envelopes (docs/protocol.md section 6): what a tool, a
// webhook or a script uses to say something in a pod, or to ask the
// gateway something (see Ask), without the join and leave that everyone
// in the pod would see for a connection. gatewayURL is the gateway's
// base URL or its /ws URL, in any of the schemes Dial takes
// (http://HOST:PORT, ws://HOST:PORT/ws…); a path before /ws is kept, and
// so is its query.
//
// Each envelope is checked and relayed exactly as if the participant had
// sent it over WebSocket (the same rules, codes, capabilities and rate
// buckets), in order. An envelope without an ID gets a new UUIDv4,
// written into it as Send does, so that publishing it again after an
// error carries the same id and the gateway refuses the second with
// wire.CodeDuplicateID when the first got through.
//
// Publish returns one result per envelope, in order: its id when it was
// relayed, the answer's payload for a gateway/contexts or gateway/history
// request, or the refusal (Error, the system/error payload; ResultError
// makes it an error). A refused envelope does not make Publish fail: the
// error is for a request that failed as a whole, a *RefusedError when
// the gateway answered it with an HTTP error (401, 403, 400 invalid_pod,
// 503…), as it refuses an upgrade.
func Publish(ctx context.Context, gatewayURL string, opts PublishOptions, envs ...*wire.Envelope) ([]wire.PublishResult, error) {
	raws := make([]json.RawMessage, len(envs))
	for i, env := range envs {
		if env == nil {
			return nil, fmt.Errorf("client: publish to pod %s: envelope %d is nil", opts.Pod, i)
		}
		if env.ID == "" {
			env.ID = uuid.NewString()
		}
		withTrace(ctx, env) // the caller's span, when ctx carries one (trace.go)
		b, err := json.Marshal(env)
		if err != nil {
			return nil, fmt.Errorf("client: publish to pod %s: envelope %s: %w", opts.Pod, env.ID, err)
		}
		raws[i] = b
	}
	return PublishRaw(ctx, gatewayURL, opts, raws...)
}

// PublishRaw is Publish for envelopes already in JSON, which it sends as
// they are, for a tool that passes on JSON it did not write (the
// gateway judges it: an envelope that is not a JSON object gets an
// wire.CodeInvalidJSON result). It fills no id. Line breaks in an
// envelope, white space between JSON tokens, are sent as spaces when
// there are several (one envelope a line, application/x-ndjson), as the
// gateway would turn them anyway.
func PublishRaw(ctx context.Context, gatewayURL string, opts PublishOptions, envs ...json.RawMessage) ([]wire.PublishResult, error) {
	res, err := publish(ctx, gatewayURL, opts, envs)
	if err != nil {
		return nil, fmt.Errorf("client: publish to pod %s: %w", opts.Pod, err)
	}
	return res, nil
}

func publish(ctx context.Context, gatewayURL string, opts PublishOptions, envs []json.RawMessage) ([]wire.PublishResult, error) {
	if opts.Pod == "" {
		return nil, errors.New("PublishOptions.Pod is required")
	}
	if len(envs) == 0 {
		return nil, errors.New("no envelope to publish")
	}
	u, secret, err := publishURL(gatewayURL, opts)
	if err != nil {
		return nil, err
	}
	var body []byte
	contentType := "application/json"
	if len(envs) == 1 {
		body = envs[0]
	} else {
		contentType = "application/x-ndjson"
		var b bytes.Buffer
		for _, env := range envs {
			line := bytes.TrimSpace(env)
			if len(line) == 0 {
				line = []byte("{}") // keeps the results in step; the gateway refuses it (no kind)
			}
			for _, c := range line {
				if c == '\n' || c == '\r' {
					c = ' '
				}
				b.WriteByte(c)
			}
			b.WriteByte('\n')
		}
		body = b.Bytes()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, redact(err, secret, url.QueryEscape(secret))
	}
	for k, vs := range opts.HTTPHeader {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Accept", "application/json")
	if opts.Token != "" {
		req.Header.Set("Authorization", "Bearer "+opts.Token)
	}
	hc, err := tlsClient(opts.HTTPClient, opts.TLSConfig)
	if err != nil {
		return nil, err
	}
	if hc == nil {
		hc = http.DefaultClient
	} else if opts.TLSConfig != nil {
		defer hc.CloseIdleConnections() // its own transport, used once
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, redact(err, secret, url.QueryEscape(secret))
	}
	defer resp.Body.Close()
	limit := opts.ReadLimit
	if limit <= 0 {
		limit = DefaultReadLimit
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading the gateway's answer: %w", redact(err, secret, url.QueryEscape(secret)))
	}
	if resp.StatusCode != http.StatusOK {
		e := refusal(resp.StatusCode, data[:min(len(data), 4096)])
		e.publish = true
		return nil, e
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("the gateway's answer is over %d bytes (PublishOptions.ReadLimit)", limit)
	}
	var ans wire.PublishAnswer
	if err := json.Unmarshal(data, &ans); err != nil {
		return nil, fmt.Errorf("the gateway's answer does not read: %w: %.200q", err, data)
	}
	if len(ans.Results) != len(envs) {
		return nil, fmt.Errorf("the gateway answered %d results for %d envelopes", len(ans.Results), len(envs))
	}
	return ans.Results, nil
}

// publishURL is the URL of POST /pods/NAME/envelopes on the gateway of
// gatewayURL, and the token given in its query, if any.
func publishURL(gatewayURL string, opts PublishOptions) (*url.URL, string, error) {
	u, err := url.Parse(gatewayURL)
	if err != nil {
		return nil, "", fmt.Errorf("the gateway's URL: %w", err)
	}
	if err := wire.AsHTTP(u); err != nil {
		return nil, "", err
	}
	prefix := strings.TrimSuffix(u.EscapedPath(), "/")
	prefix = strings.TrimSuffix(prefix, wire.PathWS)
	raw := prefix + wire.PublishPath(opts.Pod)
	if u.Path, err = url.PathUnescape(raw); err != nil {
		return nil, "", fmt.Errorf("the gateway's URL %q: %w", gatewayURL, err)
	}
	u.RawPath = raw
	u.Fragment = ""
	q := u.Query()
	secret := q.Get(wire.QueryToken)
	if opts.Participant != "" {
		q.Set(wire.QueryParticipant, opts.Participant)
	}
	u.RawQuery = q.Encode()
	return u, secret, nil
}

// Ask sends one request to the gateway (kind wire.RequestContexts or
// wire.RequestHistory, with payload in JSON) over POST
// /pods/NAME/envelopes, without joining the pod, and returns the answer's
// payload: a wire.ContextsAnswer or a wire.HistoryAnswer. The gateway
// answers as it would a participant with the default filter, which admits
// everything (docs/protocol.md section 6); wire.RequestFilter has no
// meaning there and is refused with wire.CodeUnknownRequest.
//
// A refused request is a *GatewayError (IsCode tests its code); a
// request refused as a whole (HTTP 401, 403, 400…) a *RefusedError.
func Ask(ctx context.Context, gatewayURL string, opts PublishOptions, kind string, payload any) (json.RawMessage, error) {
	if !strings.HasPrefix(kind, "gateway/") {
		return nil, fmt.Errorf("client: ask %s: Ask is for gateway/* kinds; publish other envelopes with Publish", kind)
	}
	env, err := wire.NewEnvelope(kind, payload)
	if err != nil {
		return nil, fmt.Errorf("client: ask %s: %w", kind, err)
	}
	if env.Payload == nil {
		env.Payload = json.RawMessage("{}")
	}
	res, err := Publish(ctx, gatewayURL, opts, env)
	if err != nil {
		return nil, err
	}
	if err := ResultError(res[0]); err != nil {
		return nil, fmt.Errorf("client: ask %s: %w", kind, err)
	}
	if len(res[0].Answer) == 0 {
		return nil, fmt.Errorf("client: ask %s: the gateway relayed the request instead of answering it", kind)
	}
	return res[0].Answer, nil
}

// ResultError is the refusal of one result of Publish as a *GatewayError,
// as a participant connected over WebSocket would have received it (its
// RefusedID is the envelope's id), or nil when the envelope was relayed
// or answered.
func ResultError(r wire.PublishResult) error {
	if r.Error == nil {
		return nil
	}
	env := &wire.Envelope{From: wire.GatewayID, Kind: wire.KindError}
	if r.ID != "" {
		env.CorrelationID = wire.CorrelationID{r.ID}
	}
	if b, err := json.Marshal(r.Error); err == nil {
		env.Payload = b
	}
	return &GatewayError{Envelope: env, ErrorPayload: *r.Error}
}
