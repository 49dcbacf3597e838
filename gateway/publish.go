package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/mcpp/gateway/audit"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/pod"
	"github.com/mcpp/gateway/wire"
)

// servePublish is POST /pods/NAME/envelopes: a tool, a webhook or a
// script sends envelopes without joining (docs/protocol.md section 6).
// Each is checked and relayed as if its participant had sent it over
// WebSocket; nobody hears of a join or a leave, and nothing is delivered
// back to the request.
//
// A web page must not publish into a gateway its visitor can reach (a
// developer's, in open mode): the Origin is checked as for /ws, and the
// body must be declared JSON, which a cross-site form cannot do and a
// cross-site script cannot without a CORS preflight, which the gateway
// never grants.
func (g *Gateway) servePublish(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		g.refuseWith(w, http.StatusMethodNotAllowed, envelope.Errorf(wire.CodeInvalidEnvelope, "POST envelopes to /pods/NAME/envelopes"))
		return
	}
	if !g.accepting.Load() {
		g.refuse(w, envelope.Errorf(wire.CodeShuttingDown, "the gateway is shutting down"))
		return
	}
	if !g.originAllowed(r) {
		g.refuseJoin(w, r, audit.TransportPublish, r.PathValue("pod"), nobody, envelope.Errorf(wire.CodeForbidden,
			"origin %q may not publish (see --allowed-origins)", r.Header.Get("Origin")).Ruled(audit.RuleOrigin))
		return
	}
	lines, ok := bodyType(r.Header.Get("Content-Type"))
	if !ok {
		g.refuseWith(w, http.StatusUnsupportedMediaType, envelope.Errorf(wire.CodeInvalidJSON,
			"Content-Type must be application/json (one envelope) or application/x-ndjson, application/ndjson or application/jsonl (one per line), not %q",
			r.Header.Get("Content-Type")))
		return
	}
	name := r.PathValue("pod")
	if !envelope.ValidPodName(name) {
		g.refuse(w, envelope.Errorf(wire.CodeInvalidPod, "pod must be 1 to 64 characters of [A-Za-z0-9._-]"))
		return
	}
	who, e := g.authenticate(w, r, name, false)
	if e != nil {
		g.refuseJoin(w, r, audit.TransportPublish, name, who, e)
		return
	}
	limit := 4 * int64(g.cfg.MaxMessageBytes)
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return // the client went away
	}
	switch {
	case int64(len(body)) > limit:
		g.refuse(w, envelope.Errorf(wire.CodeInvalidJSON, "the body is over %d bytes (4 x --max-message-bytes)", limit))
		return
	case len(bytes.TrimSpace(body)) == 0:
		g.refuse(w, envelope.Errorf(wire.CodeInvalidJSON, "the body is empty: send one envelope (application/json) or one per line (application/x-ndjson)"))
		return
	}
	var envs [][]byte
	if lines {
		envs = splitLines(body)
	} else {
		var e envelope.Envelope
		if pe := e.Parse(bytes.Clone(body)); pe != nil && pe.Code == wire.CodeInvalidJSON {
			g.refuse(w, envelope.Errorf(wire.CodeInvalidJSON, "an application/json body is one JSON object: %s", pe.Message))
			return
		}
		envs = [][]byte{body}
	}

	id := who.ID
	from := &pod.Sender{ID: id, Caps: who.Caps, Protocol: wire.ProtocolMCPP, Hold: true}
	var p *pod.Pod
	for {
		found, perr := g.readyPod(r.Context(), name)
		if perr != nil {
			g.refuse(w, perr)
			return
		}
		dead, refusal := found.Acquire(from)
		if refusal != nil {
			g.refuseJoin(w, r, audit.TransportPublish, name, who, refusal) // banned (gateway/kick)
			return
		}
		if !dead {
			p = found
			break
		}
		// Removed as we looked it up; a new one will be made.
	}
	g.auditJoin(r, audit.TransportPublish, name, who, nil)
	from.Buckets = g.node.Buckets.Acquire(bucketKey(name, id))
	for i, line := range envs {
		if hook := hookPublishLine.Load(); hook != nil && i > 0 {
			(*hook)(name, id, i)
		}
		// A kick of the participant while the body is handled refuses
		// the rest of it (forbidden): it is checked in the pod's order.
		p.Handle(from, line, false)
		p.Throttle(from)
	}
	from.Flush()
	g.awaitStored(r.Context(), p, from.Results)
	g.node.Buckets.Release(bucketKey(name, id), time.Now())
	p.Release(from)
	g.maybeRemovePod(p)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(wire.PublishAnswer{Results: from.Results})
}

// publishStoredWait bounds how long a publish's answer waits for its
// envelopes to be stored, where the history stream orders the pod: a
// stream failing over takes a few seconds; one that takes longer has no
// quorum this node reaches.
const publishStoredWait = 10 * time.Second

// awaitStored waits until the envelopes a publish relayed are stored in
// the pod's history stream (pod.Pod.Stored), so that its answer
// acknowledges only what is stored; those not stored within
// publishStoredWait are answered unconfirmed instead: they may still be
// stored later (their outcome is not known), and sent again with the same
// id they are refused duplicate_id once they are.
func (g *Gateway) awaitStored(ctx context.Context, p *pod.Pod, results []wire.PublishResult) {
	var ids []string
	for _, r := range results {
		if r.Error == nil && r.ID != "" {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, publishStoredWait)
	defer cancel()
	left := p.Stored(ctx, ids)
	if len(left) == 0 {
		return
	}
	pending := map[string]bool{}
	for _, id := range left {
		pending[id] = true
	}
	e := envelope.Errorf(wire.CodeUnconfirmed, "accepted, but the cluster's history stream did not confirm it stored it within %v: it may be stored or not; send it again with the same id (duplicate_id says when it was)", publishStoredWait)
	for i := range results {
		if results[i].Error == nil && pending[results[i].ID] {
			pl := e.Payload()
			results[i] = wire.PublishResult{ID: results[i].ID, Error: &pl}
			g.node.Metrics.Errors.WithLabelValues(string(wire.CodeUnconfirmed)).Inc()
		}
	}
}

// hookPublishLine, when set (by tests: export_test.go), runs before each
// envelope of a publish after its first, so that a test can hold a
// publish in the middle of its body while the pod changes.
var hookPublishLine atomic.Pointer[func(pod, participant string, line int)]

// splitLines cuts a newline-delimited body into its envelopes: every line
// that is not blank, each a slice of body itself, so that a long body's
// lines stay whole however many there are (a scanner would reuse its
// buffer under them).
func splitLines(body []byte) [][]byte {
	var out [][]byte
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		if line = bytes.TrimSpace(line); len(line) > 0 {
			out = append(out, line)
		}
	}
	return out
}

// bodyType reads a publish request's Content-Type: ok when it is JSON,
// lines when it is newline-delimited JSON (one envelope per line).
func bodyType(contentType string) (lines, ok bool) {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false, false
	}
	switch mt {
	case "application/json":
		return false, true
	case "application/x-ndjson", "application/ndjson", "application/jsonl":
		return true, true
	}
	return false, false
}
