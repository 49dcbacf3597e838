package integration

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"

	"github.com/mcpp/gateway/bridge/bridgetest"
	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// The resources and prompts of the pod's MCP servers for an MCP host
// (issue 35, docs/protocol.md section 9): an MCP host on /mcp (the
// official Go SDK's client) lists, reads and subscribes to the resources
// and templates of the servers bridged into its pod, each under
// mcpp://pods/POD/servers/SERVER/ followed by the server's own URI, and
// lists and gets their prompts, named SERVER__PROMPT; it completes their
// arguments; it hears of their changes. Each is its participant's
// mcp/request through the pod, so its capabilities decide what it sees.

// hostNotes counts what an MCP host was told, by kind.
type hostNotes struct {
	updated, resources, prompts chan string
}

func newHostNotes() (*hostNotes, *mcp.ClientOptions) {
	n := &hostNotes{updated: make(chan string, 64), resources: make(chan string, 64), prompts: make(chan string, 64)}
	put := func(c chan string, s string) {
		select {
		case c <- s:
		default:
		}
	}
	return n, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
			put(n.updated, r.Params.URI)
		},
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { put(n.resources, "") },
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { put(n.prompts, "") },
	}
}

// await waits for what c is told next, at most 15 s.
func await(t *testing.T, c chan string, what string) string {
	t.Helper()
	select {
	case s := <-c:
		return s
	case <-time.After(15 * time.Second):
		t.Fatalf("the host was not told %s within 15s", what)
		return ""
	}
}

func resourceURIs(t *testing.T, cs *mcp.ClientSession) (uris, templates []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rs, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs.Resources {
		uris = append(uris, r.URI)
	}
	ts, err := cs.ListResourceTemplates(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range ts.ResourceTemplates {
		templates = append(templates, tp.URITemplate)
	}
	return uris, templates
}

func promptNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ps, err := cs.ListPrompts(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range ps.Prompts {
		names = append(names, p.Name)
	}
	return names
}

// readText reads uri and returns its one content's URI and text.
func readText(t *testing.T, cs *mcp.ClientSession, uri string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
	if err != nil {
		t.Fatalf("resources/read %s: %v", uri, err)
	}
	if len(res.Contents) != 1 {
		t.Fatalf("resources/read %s: %d contents", uri, len(res.Contents))
	}
	return res.Contents[0].URI, res.Contents[0].Text
}

// expand is what a host does with a URI template: RFC 6570 expansion.
func expand(t *testing.T, tmpl string, vars map[string]string) string {
	t.Helper()
	v := uritemplate.Values{}
	for k, s := range vars {
		v.Set(k, uritemplate.String(s))
	}
	out, err := uritemplate.MustNew(tmpl).Expand(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func complete(t *testing.T, cs *mcp.ClientSession, p *mcp.CompleteParams) ([]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := cs.Complete(ctx, p)
	if err != nil {
		return nil, err
	}
	return res.Completion.Values, nil
}

// serverCall calls a tool of a pod's server and returns the text of its
// result, which must not be an error.
func serverCall(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil || res.IsError || len(res.Content) == 0 {
		t.Fatalf("%s: %v %+v", tool, err, res)
	}
	text, _ := res.Content[0].(*mcp.TextContent)
	if text == nil {
		t.Fatalf("%s: %T, not text", tool, res.Content[0])
	}
	return text.Text
}

// refusedWith reports whether err is the gateway's refusal (-32000, its
// data the system/error payload) with code.
func refusedWith(err error, code string) bool {
	var rpc *jsonrpc.Error
	if !errors.As(err, &rpc) || rpc.Code != -32000 {
		return false
	}
	var data struct{ Error string }
	return json.Unmarshal(rpc.Data, &data) == nil && data.Error == code
}

// TestMCPHostServerResources: the Go SDK server of testdata, bridged as
// "tools". The host lists its resources and template under the gateway's
// URIs, reads them (a template through an expansion whose values hold
// the scheme's separators and non-ASCII: the server gets exactly its own
// expansion), subscribes to its counter and hears of a change, gets its
// prompt (the resource in it under the gateway's URI, readable), completes
// the prompt's and the template's arguments, and hears of the server's new
// resource and prompt. Each of those is the host's mcp/request in the
// pod's history. A host whose capabilities allow no read or get sees
// none, and its requests are refused.
func TestMCPHostServerResources(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.History = 1000
		c.Tokens = harness.WriteFile(t, "tokens.json", `{"tokens": [
  {"token": "host-t", "participant": "claude", "capabilities": ["chat", "context/*", "conclusion", "mcp/request"], "pods": ["*"]},
  {"token": "narrow-t", "participant": "narrow", "capabilities": ["chat",
     {"kind": "mcp/request", "payload": {"method": "tools/call"}}], "pods": ["*"]},
  {"token": "reader-t", "participant": "reader", "capabilities": ["chat",
     {"kind": "mcp/request", "payload": {"method": "resources/read", "params": {"uri": "test://greeting"}}}], "pods": ["*"]},
  {"token": "tools-t", "participant": "tools", "capabilities": ["mcp/response*", "mcp/notification"], "pods": ["*"]},
  {"token": "watch-t", "participant": "watcher", "capabilities": ["chat", "mcp/request"], "pods": ["*"]},
  {"token": "modern-t", "participant": "modern", "capabilities": ["mcp/request"], "pods": ["*"]},
  {"token": "tx-t", "participant": "tx", "capabilities": ["*"], "pods": ["*"]},
  {"token": "raw-t", "participant": "raw", "capabilities": ["chat"], "pods": ["*"]}
]}`)
	})
	const pod = "host-res"
	const base = "mcpp://pods/" + pod + "/servers/tools/"
	watcher := bridgetest.DialWith(t, g.WS, client.Options{Pod: pod, Token: "watch-t"})
	spy := g.DialToken(t, pod, "tx-t", true, "")
	// MCP 2025-11-25, whose resources/subscribe and resources/unsubscribe
	// the server says on its standard error; TestSubscriptionsOf2026Server
	// has a server of 2026-07-28.
	bridge := startBridgeProc(t, g, watcher, pod, "tools", []string{"--token", "tools-t", "--protocol", "2025-11-25"}, goServer(t))

	notes, opts := newHostNotes()
	cs := harness.MCPConnect(t, g.URL, pod, "", harness.MCPOpts{Header: harness.Bearer("host-t"), Version: harness.MCPSessions, Client: opts})
	uris, templates := resourceURIs(t, cs)
	for _, want := range []string{base + "test://greeting", base + "test://counter"} {
		if !slices.Contains(uris, want) {
			t.Fatalf("the host's resources %v lack %s", uris, want)
		}
	}
	if !slices.Contains(templates, base+"test://notes/{name}") || !slices.Contains(templates, "mcpp://pods/{pod}/inbox/{participant}") {
		t.Fatalf("the host's templates %v lack the server's or the inbox", templates)
	}

	// Reading, and reading through the template.
	if u, text := readText(t, cs, base+"test://greeting"); u != base+"test://greeting" || text != "hello" {
		t.Fatalf("test://greeting read as %q %q", u, text)
	}
	name := "ü b/c?d#e&f=mcpp://pods/x/servers/y/"
	hostURI := expand(t, base+"test://notes/{name}", map[string]string{"name": name})
	serverURI := expand(t, "test://notes/{name}", map[string]string{"name": name})
	if u, text := readText(t, cs, hostURI); u != hostURI || text != "note "+strings.TrimPrefix(serverURI, "test://notes/") {
		t.Fatalf("%s read as %q %q, want the server's note of its own expansion %s", hostURI, u, text, serverURI)
	}

	// Subscribing: a change reaches the host, under its URI.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: base + "test://counter"}); err != nil {
		t.Fatalf("resources/subscribe: %v", err)
	}
	serverCall(t, cs, "tools__bump", nil)
	if got := await(t, notes.updated, "that the counter changed"); got != base+"test://counter" {
		t.Fatalf("notifications/resources/updated of %q, want %s", got, base+"test://counter")
	}
	if _, text := readText(t, cs, base+"test://counter"); text != "count 1" {
		t.Fatalf("the counter reads %q after one bump", text)
	}
	if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: base + "test://counter"}); err != nil {
		t.Fatalf("resources/unsubscribe: %v", err)
	}
	harness.Eventually(t, 10*time.Second, "the server unsubscribed", func() bool {
		return strings.Contains(bridge.stderr.String(), "resources/unsubscribe test://counter")
	})

	// A host of the protocol without sessions subscribes with
	// subscriptions/listen. The server's subscription is the pod's (mcpp
	// bridge counts who subscribes): the second subscriber does not
	// subscribe the server again, and while that host listens, another's
	// unsubscribe does not reach the server, and the update still comes.
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: base + "test://counter"}); err != nil {
		t.Fatalf("resources/subscribe again: %v", err)
	}
	modernNotes, modernOpts := newHostNotes()
	modern := harness.MCPConnect(t, g.URL, pod, "", harness.MCPOpts{Header: harness.Bearer("modern-t"), Client: modernOpts})
	listening := make(chan error, 1)
	go func() {
		listening <- modern.Subscribe(context.Background(), &mcp.SubscribeParams{URI: base + "test://counter"})
	}()
	// The bridge answered the listening host's subscribe (spy, who watches
	// the pod, sees the answer), without subscribing the server again.
	for deadline := time.Now().Add(15 * time.Second); ; {
		m := spy.Next(time.Until(deadline))
		if m == nil {
			t.Fatal("the bridge did not answer the listening host's resources/subscribe")
		}
		if m.Kind() == "mcp/response" && m.Str("from") == "tools" && harness.JSONEqual(m["to"], []any{"modern"}) {
			break
		}
	}
	if n := strings.Count(bridge.stderr.String(), "resources/subscribe test://counter"); n != 2 {
		t.Fatalf("the server was asked to subscribe %d times, want twice (once for each time it had no subscriber)", n)
	}
	if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: base + "test://counter"}); err != nil {
		t.Fatalf("resources/unsubscribe while another listens: %v", err)
	}
	serverCall(t, cs, "tools__bump", nil)
	if got := await(t, modernNotes.updated, "the listening host that the counter changed"); got != base+"test://counter" {
		t.Fatalf("the listening host was told of %q", got)
	}
	harness.Eventually(t, 10*time.Second, "the second bump said", func() bool {
		return strings.Count(bridge.stderr.String(), "tools/call bump") == 2
	})
	if n := strings.Count(bridge.stderr.String(), "resources/unsubscribe test://counter"); n != 1 {
		t.Fatalf("the server was asked to unsubscribe %d times, want once: another host still listened", n)
	}
	if err := modern.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: base + "test://counter"}); err != nil {
		t.Fatalf("the listening host's unsubscribe: %v", err)
	}
	select {
	case <-listening:
	case <-time.After(15 * time.Second):
		t.Fatal("the listening host's subscriptions/listen did not end with its unsubscribe")
	}
	harness.Eventually(t, 10*time.Second, "the last subscriber's end reached the server", func() bool {
		return strings.Count(bridge.stderr.String(), "resources/unsubscribe test://counter") == 2
	})

	// Prompts: the host's name, the server's messages, the resource in
	// them under the host's URI, which reads.
	if names := promptNames(t, cs); !slices.Contains(names, "tools__greet") {
		t.Fatalf("the host's prompts %v lack tools__greet", names)
	}
	got, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "tools__greet", Arguments: map[string]string{"name": "Ann"}})
	if err != nil || len(got.Messages) != 2 {
		t.Fatalf("prompts/get tools__greet: %v %+v", err, got)
	}
	if text, ok := got.Messages[0].Content.(*mcp.TextContent); !ok || text.Text != "Say hello to Ann" {
		t.Fatalf("tools__greet's first message: %+v", got.Messages[0].Content)
	}
	embedded, ok := got.Messages[1].Content.(*mcp.EmbeddedResource)
	if !ok || embedded.Resource.URI != base+"test://greeting" {
		t.Fatalf("tools__greet's resource: %+v, want it under %s", got.Messages[1].Content, base+"test://greeting")
	}
	if _, text := readText(t, cs, embedded.Resource.URI); text != "hello" {
		t.Fatalf("the prompt's resource reads %q", text)
	}

	// Completion: of the prompt's argument and of the template's.
	if vals, err := complete(t, cs, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "tools__greet"},
		Argument: mcp.CompleteParamsArgument{Name: "name", Value: "A"}}); err != nil || !slices.Equal(vals, []string{"Alice"}) {
		t.Fatalf("completing tools__greet's name: %v %v", vals, err)
	}
	if vals, err := complete(t, cs, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/resource", URI: base + "test://notes/{name}"},
		Argument: mcp.CompleteParamsArgument{Name: "name", Value: "b"}}); err != nil || !slices.Equal(vals, []string{"beta"}) {
		t.Fatalf("completing the notes template's name: %v %v", vals, err)
	}
	if _, err := complete(t, cs, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "tools__nope"},
		Argument: mcp.CompleteParamsArgument{Name: "name", Value: "b"}}); err == nil {
		t.Fatal("completing a prompt that is not listed succeeded")
	}

	// The server's new resource and prompt reach the host.
	serverCall(t, cs, "tools__add_resource", map[string]any{"name": "fresh"})
	await(t, notes.resources, "that the resources changed")
	harness.Eventually(t, 10*time.Second, "the new resource listed", func() bool {
		uris, _ := resourceURIs(t, cs)
		return slices.Contains(uris, base+"test://added/fresh")
	})
	serverCall(t, cs, "tools__add_prompt", map[string]any{"name": "fresh"})
	await(t, notes.prompts, "that the prompts changed")
	harness.Eventually(t, 10*time.Second, "the new prompt listed", func() bool {
		return slices.Contains(promptNames(t, cs), "tools__fresh")
	})

	// Each was the host's request in the pod.
	tx := g.Dial(t, pod, "tx", "token=tx-t")
	raw := g.Dial(t, pod, "raw", "token=raw-t&history=all&fold=0")
	harness.Sentinel(tx, "raw-end", raw)
	seen := map[string]bool{}
	for _, m := range harness.Until(raw, "raw-end") {
		if m.Kind() == "mcp/request" && m.Str("from") == "claude" {
			p := m.Payload()
			params, _ := p["params"].(map[string]any)
			uri, _ := params["uri"].(string)
			seen[p["method"].(string)+" "+uri] = true
		}
	}
	for _, want := range []string{"resources/read test://greeting", "resources/read " + serverURI, "resources/subscribe test://counter",
		"resources/unsubscribe test://counter", "prompts/get ", "completion/complete "} {
		if !seen[want] {
			t.Errorf("the pod's history lacks the host's %s; it holds %v", want, seen)
		}
	}

	// A host that may only call tools sees no resource and no prompt,
	// and is refused what it asks.
	narrow := harness.MCPConnect(t, g.URL, pod, "", harness.MCPOpts{Header: harness.Bearer("narrow-t"), Version: harness.MCPSessions})
	if uris, templates := resourceURIs(t, narrow); slices.ContainsFunc(append(uris, templates...), func(u string) bool { return strings.HasPrefix(u, base) }) {
		t.Fatalf("a host that may not read lists %v %v", uris, templates)
	}
	if names := promptNames(t, narrow); len(names) != 0 {
		t.Fatalf("a host that may not get prompts lists %v", names)
	}
	if _, err := narrow.ReadResource(ctx, &mcp.ReadResourceParams{URI: base + "test://greeting"}); err == nil {
		t.Fatal("a host that may not read read test://greeting")
	}
	if err := narrow.Subscribe(ctx, &mcp.SubscribeParams{URI: base + "test://counter"}); !refusedWith(err, "capability_violation") {
		t.Fatalf("a host that may not subscribe: %v, want capability_violation", err)
	}
	// One that may read test://greeting alone lists it alone.
	reader := harness.MCPConnect(t, g.URL, pod, "", harness.MCPOpts{Header: harness.Bearer("reader-t"), Version: harness.MCPSessions})
	uris, templates = resourceURIs(t, reader)
	var its []string
	for _, u := range append(uris, templates...) {
		if strings.HasPrefix(u, base) {
			its = append(its, u)
		}
	}
	if !slices.Equal(its, []string{base + "test://greeting"}) {
		t.Fatalf("a host that may read test://greeting alone lists %v", its)
	}
	if _, text := readText(t, reader, base+"test://greeting"); text != "hello" {
		t.Fatalf("the reader read %q", text)
	}
}

// TestMCPHostEverythingResources: server-everything (pinned), over stdio
// through mcpp bridge. Its documents are listed under the gateway's URIs
// and read; its dynamic text template is read through an expansion; its
// prompts are listed and got, the resource in one readable under the
// gateway's URI; its completions of prompt and template arguments come
// through, the context's arguments included; a subscription hears its
// simulated updates.
func TestMCPHostEverythingResources(t *testing.T) {
	t.Parallel()
	server := everythingServer(t)
	g := harness.StartGateway(t, func(c *gateway.Config) { c.History = 1000 })
	const pod = "host-everything"
	const base = "mcpp://pods/" + pod + "/servers/everything/"
	watcher := bridgetest.Dial(t, g.WS, pod, "watcher")
	startBridgeProc(t, g, watcher, pod, "everything", nil, server...)
	notes, opts := newHostNotes()
	cs := harness.MCPConnect(t, g.URL, pod, "claude", harness.MCPOpts{Version: harness.MCPSessions, Client: opts})

	uris, templates := resourceURIs(t, cs)
	doc := base + "demo://resource/static/document/architecture.md"
	if !slices.Contains(uris, doc) {
		t.Fatalf("the host's resources %v lack %s", uris, doc)
	}
	textT := base + "demo://resource/dynamic/text/{resourceId}"
	if !slices.Contains(templates, textT) || !slices.Contains(templates, base+"demo://resource/dynamic/blob/{resourceId}") {
		t.Fatalf("the host's templates %v lack server-everything's", templates)
	}
	if u, text := readText(t, cs, doc); u != doc || !strings.Contains(text, "Architecture") {
		t.Fatalf("%s read as %q %.80q", doc, u, text)
	}
	three := expand(t, textT, map[string]string{"resourceId": "3"})
	if u, text := readText(t, cs, three); u != base+"demo://resource/dynamic/text/3" || !strings.HasPrefix(text, "Resource 3: This is a plaintext resource") {
		t.Fatalf("%s read as %q %q", three, u, text)
	}

	names := promptNames(t, cs)
	for _, want := range []string{"everything__simple-prompt", "everything__args-prompt", "everything__completable-prompt", "everything__resource-prompt"} {
		if !slices.Contains(names, want) {
			t.Fatalf("the host's prompts %v lack %s", names, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "everything__args-prompt", Arguments: map[string]string{"city": "Paris", "state": "Texas"}})
	if err != nil || len(p.Messages) != 1 || p.Messages[0].Content.(*mcp.TextContent).Text != "What's weather in Paris, Texas?" {
		t.Fatalf("everything__args-prompt: %v %+v", err, p)
	}
	p, err = cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "everything__resource-prompt", Arguments: map[string]string{"resourceType": "Text", "resourceId": "5"}})
	if err != nil || len(p.Messages) != 2 {
		t.Fatalf("everything__resource-prompt: %v %+v", err, p)
	}
	embedded, ok := p.Messages[1].Content.(*mcp.EmbeddedResource)
	if !ok || embedded.Resource.URI != base+"demo://resource/dynamic/text/5" {
		t.Fatalf("everything__resource-prompt's resource: %+v", p.Messages[1].Content)
	}
	if _, text := readText(t, cs, embedded.Resource.URI); !strings.HasPrefix(text, "Resource 5:") {
		t.Fatalf("the prompt's resource reads %q", text)
	}

	for _, c := range []struct {
		ref  mcp.CompleteReference
		arg  mcp.CompleteParamsArgument
		ctx  map[string]string
		want []string
	}{
		{mcp.CompleteReference{Type: "ref/prompt", Name: "everything__completable-prompt"}, mcp.CompleteParamsArgument{Name: "department", Value: "S"}, nil, []string{"Sales", "Support"}},
		{mcp.CompleteReference{Type: "ref/prompt", Name: "everything__completable-prompt"}, mcp.CompleteParamsArgument{Name: "name", Value: "A"}, map[string]string{"department": "Engineering"}, []string{"Alice"}},
		{mcp.CompleteReference{Type: "ref/resource", URI: textT}, mcp.CompleteParamsArgument{Name: "resourceId", Value: "42"}, nil, []string{"42"}},
	} {
		params := &mcp.CompleteParams{Ref: &c.ref, Argument: c.arg}
		if c.ctx != nil {
			params.Context = &mcp.CompleteContext{Arguments: c.ctx}
		}
		if vals, err := complete(t, cs, params); err != nil || !slices.Equal(vals, c.want) {
			t.Errorf("completing %+v %+v: %v %v, want %v", c.ref, c.arg, vals, err, c.want)
		}
	}

	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: doc}); err != nil {
		t.Fatalf("resources/subscribe %s: %v", doc, err)
	}
	serverCall(t, cs, "everything__toggle-subscriber-updates", nil)
	if got := await(t, notes.updated, "of server-everything's simulated update"); got != doc {
		t.Fatalf("notifications/resources/updated of %q, want %s", got, doc)
	}
}
