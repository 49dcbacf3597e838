package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpp/gateway/wire"
)

// The bridge speaks to its server in the newest MCP revision the two
// share. MCP 2026-07-28 has no handshake: a client may ask server/discover
// what the server speaks and offers, and every request carries, in its
// params._meta, the revision, the client's name and its capabilities (the
// "_meta triple"); notifications come on subscriptions/listen streams the
// client opens, and what a server asks of its client comes in a call's
// result (input requests, inputs.go). Older revisions begin with
// initialize. So the bridge asks server/discover first (as the SDK's own
// client does); a server that answers with an error, or offers no revision
// from 2026-07-28 on, is an older one, and gets initialize with
// legacyVersion. Config.ProtocolVersion can ask for an older revision.

// The revisions the bridge speaks: modernVersion without a handshake,
// legacyVersion with initialize (the newest that has it).
const (
	modernVersion = "2026-07-28"
	legacyVersion = "2025-11-25"
)

// The _meta keys of MCP 2026-07-28's requests (the SDK's mcp.MetaKey…).
const (
	metaProtocolVersion    = mcp.MetaKeyProtocolVersion
	metaClientInfo         = mcp.MetaKeyClientInfo
	metaClientCapabilities = mcp.MetaKeyClientCapabilities
	metaServerInfo         = mcp.MetaKeyServerInfo
	// metaRelatedTask names, in a server's request, the task it is about
	// (MCP 2025-11-25's tasks).
	metaRelatedTask = "io.modelcontextprotocol/related-task"
)

// clientCapabilities are what the bridge offers its server: elicitation,
// in form and URL modes, which it passes to the participant whose call
// caused the question (questions.go). No sampling and no roots: the bridge
// has no model and no folders, and a server that asks anyway is answered
// as a client without them (serverrequests.go).
func clientCapabilities() map[string]any {
	return map[string]any{"elicitation": map[string]any{"form": map[string]any{}, "url": map[string]any{}}}
}

// handshake begins the session in the newest revision the server speaks.
func (s *session) handshake() error {
	want := s.b.cfg.ProtocolVersion
	if want == "" || want >= modernVersion {
		ok, err := s.discover()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		want = legacyVersion
	}
	return s.initialize(want)
}

// discover asks server/discover in MCP 2026-07-28. It reports false, with
// no error, when the server is an older one (it refused the request, or
// offers no revision from 2026-07-28 on); an error is a connection that
// failed.
func (s *session) discover() (bool, error) {
	s.triple = map[string]json.RawMessage{
		metaProtocolVersion:    encode(modernVersion),
		metaClientInfo:         encode(map[string]any{"name": ClientName, "version": s.b.cfg.ClientVersion}),
		metaClientCapabilities: encode(clientCapabilities()),
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.b.cfg.InitializeTimeout)
	defer cancel()
	resp, err := s.call(ctx, "server/discover", s.withTriple(json.RawMessage("{}")))
	if err != nil {
		var we *jsonrpc.Error
		if errors.As(err, &we) || s.refused(err) {
			s.triple = nil
			return false, nil // a Streamable HTTP server that refused the method with an HTTP status
		}
		return false, fmt.Errorf("server/discover: %w", err)
	}
	var res struct {
		SupportedVersions []string                   `json:"supportedVersions"`
		Capabilities      json.RawMessage            `json:"capabilities"`
		Instructions      string                     `json:"instructions,omitempty"`
		Meta              map[string]json.RawMessage `json:"_meta"`
	}
	if resp.Error != nil || json.Unmarshal(resp.Result, &res) != nil || !offers(res.SupportedVersions, modernVersion) {
		s.triple = nil
		return false, nil
	}
	var info struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	_ = json.Unmarshal(res.Meta[metaServerInfo], &info)
	s.modern = true
	s.version.Store(modernVersion)
	s.serverCapabilities = res.Capabilities
	// A participant that asks the bridge for initialize gets what an
	// initialize would have said: the revision, the server's
	// capabilities, name and instructions.
	init := map[string]any{"protocolVersion": modernVersion, "capabilities": res.Capabilities}
	if info.Name != "" {
		init["serverInfo"] = info
	}
	if res.Instructions != "" {
		init["instructions"] = res.Instructions
	}
	s.initResult = encode(init)
	s.describe = fmt.Sprintf("%s %s, MCP %s", info.Name, info.Version, modernVersion)
	s.listen2026()
	return true, nil
}

// offers reports whether list holds v.
func offers(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// refused reports whether err is a Streamable HTTP server's refusal of
// one message (an HTTP error status).
func (s *session) refused(err error) bool {
	var r *refusal
	return errors.As(err, &r)
}

// initialize makes the handshake of the revisions before 2026-07-28:
// initialize, its answer, then notifications/initialized.
func (s *session) initialize(version string) error {
	params := map[string]any{
		"protocolVersion": version,
		"capabilities":    clientCapabilities(),
		"clientInfo":      map[string]any{"name": ClientName, "version": s.b.cfg.ClientVersion},
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.b.cfg.InitializeTimeout)
	defer cancel()
	resp, err := s.call(ctx, "initialize", encode(params))
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	if resp.Error != nil {
		return fmt.Errorf("initialize: the server refused: %w", resp.Error)
	}
	var res struct {
		ProtocolVersion string          `json:"protocolVersion"`
		Capabilities    json.RawMessage `json:"capabilities"`
		ServerInfo      struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"serverInfo"`
	}
	if err := json.Unmarshal(resp.Result, &res); err != nil || res.ProtocolVersion == "" {
		return fmt.Errorf("initialize: the server's answer %.200s has no protocolVersion", resp.Result)
	}
	s.initResult = resp.Result
	s.serverCapabilities = res.Capabilities
	s.version.Store(res.ProtocolVersion)
	s.describe = fmt.Sprintf("%s %s, MCP %s", res.ServerInfo.Name, res.ServerInfo.Version, res.ProtocolVersion)
	note := &jsonrpc.Request{Method: "notifications/initialized", Params: json.RawMessage("{}")}
	if err := s.conn.Write(ctx, note); err != nil {
		return fmt.Errorf("notifications/initialized: %w", err)
	}
	return nil
}

// withTriple returns a request's params with the connection keys of
// params._meta (wire.MCPConnectionMeta) the bridge's, as its server's one
// client: a modern session's triple,
// or none for a legacy session. The other keys the requester gave there
// (its progress token, its trace context) stay as they came.
func (s *session) withTriple(params json.RawMessage) json.RawMessage {
	p, ok := object(params)
	if !ok {
		if s.triple == nil {
			return params
		}
		p = map[string]json.RawMessage{}
	}
	meta, ok := object(p["_meta"])
	if !ok {
		if s.triple == nil {
			return params
		}
		meta = map[string]json.RawMessage{}
	}
	for _, k := range wire.MCPConnectionMeta {
		delete(meta, k)
	}
	for k, v := range s.triple {
		meta[k] = v
	}
	if len(meta) == 0 {
		delete(p, "_meta")
	} else {
		p["_meta"] = encode(meta)
	}
	return encode(p)
}

// listen2026 opens the subscriptions/listen stream of a modern session,
// for the list changes the server offers to tell: in MCP 2026-07-28 a
// server tells them there alone. The stream is a request of the bridge's
// that stays open for as long as the session; its answer, if one comes,
// is read and dropped (handle), and the session goes on.
func (s *session) listen2026() {
	var caps struct {
		Tools     *struct{ ListChanged bool } `json:"tools"`
		Prompts   *struct{ ListChanged bool } `json:"prompts"`
		Resources *struct{ ListChanged bool } `json:"resources"`
	}
	_ = json.Unmarshal(s.serverCapabilities, &caps)
	subs := map[string]bool{}
	if caps.Tools != nil && caps.Tools.ListChanged {
		subs["toolsListChanged"] = true
	}
	if caps.Prompts != nil && caps.Prompts.ListChanged {
		subs["promptsListChanged"] = true
	}
	if caps.Resources != nil && caps.Resources.ListChanged {
		subs["resourcesListChanged"] = true
	}
	if len(subs) == 0 {
		return
	}
	n := s.b.nextNumber()
	params := s.withTriple(encode(map[string]any{"notifications": subs}))
	go func() {
		_ = s.write(s.ctx, &jsonrpc.Request{ID: serverID(n), Method: "subscriptions/listen", Params: params})
	}()
}
