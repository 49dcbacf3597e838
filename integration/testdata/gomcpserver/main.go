// Command gomcpserver is the MCP server of mcpp bridge's integration
// tests (integration/bridge_test.go), built with the official Go SDK: a
// server as its users write one, with tools that let a test see what the
// bridge does with each kind of message.
//
//	gomcpserver                      serves MCP over stdio
//	gomcpserver -http 127.0.0.1:0    serves Streamable HTTP at /mcp, and
//	                                 prints "listening on http://ADDR/mcp"
//	                                 on standard error
//
//	gomcpserver -protocol legacy     speaks MCP up to 2025-11-25 alone
//	gomcpserver -protocol 2026       speaks MCP 2026-07-28 alone (no
//	                                 initialize)
//
// Tools: echo (its message back, after delay_ms), sleep (ms
// milliseconds, or until cancelled; it says both on standard error), pid
// (the server's process id, so that a test can kill it), add_tool (adds
// a tool: the server sends notifications/tools/list_changed), ask_llm
// (asks the client for a completion, sampling/createMessage, and reports
// what came back), ask_name (asks its user a question, elicitation, in
// whatever way the client's revision has: an input request of its result
// in 2026-07-28, which the SDK turns into elicitation/create for older
// clients; it answers with what came back), ask_url (asks its user to
// open a URL, MCP 2025-11-25's URL mode, then tells the client the
// elicitation is complete), ask_many (steps questions at once), progress
// (sends steps notifications/progress for the call's token, then
// answers), meta (the call's params._meta as it came), bump (adds one to
// the counter: the server sends notifications/resources/updated of
// test://counter to the clients subscribed to it), add_resource and
// add_prompt (add one: the server sends notifications/resources/
// list_changed or notifications/prompts/list_changed). Resources:
// test://greeting, test://counter (subscribable), and the template
// test://notes/{name}. One prompt (greet). Completion: greet's name, and
// the notes template's name. Each tool call, resources/subscribe and
// resources/unsubscribe is said on standard error ("gomcpserver PID:
// tools/call NAME", "gomcpserver PID: resources/subscribe URI").
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	addr := flag.String("http", "", "serve Streamable HTTP on this address instead of stdio")
	protocol := flag.String("protocol", "", "legacy: speak MCP up to 2025-11-25 alone; 2026: MCP 2026-07-28 alone (default: every revision of the SDK)")
	flag.Parse()
	var versions []string
	switch *protocol {
	case "legacy":
		versions = []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}
	case "2026":
		versions = []string{"2026-07-28"}
	}
	tracer, flush := startTracing()
	defer flush()
	server := newServer(versions)
	server.AddReceivingMiddleware(traced(tracer))
	if *addr == "" {
		if err := server.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			flush()
			log.Fatal(err)
		}
		return
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "listening on http://%s/mcp\n", ln.Addr())
	// MCP 2026-07-28 is stateless: its requests (which carry the
	// revision in their Mcp-Protocol-Version header) go to a stateless
	// handler, as the SDK serves them; older ones to one with sessions.
	get := func(*http.Request) *mcp.Server { return server }
	stateful := mcp.NewStreamableHTTPHandler(get, nil)
	stateless := mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{Stateless: true})
	mux := http.NewServeMux()
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Protocol-Version") >= "2026-07-28" {
			stateless.ServeHTTP(w, r)
			return
		}
		stateful.ServeHTTP(w, r)
	}))
	log.Fatal(http.Serve(ln, mux))
}

type echoArgs struct {
	Message string `json:"message" jsonschema:"the text to echo"`
	DelayMS int    `json:"delay_ms,omitempty" jsonschema:"wait this many milliseconds first"`
}

type sleepArgs struct {
	MS int `json:"ms" jsonschema:"how long to sleep, in milliseconds"`
}

type nameArgs struct {
	Name string `json:"name" jsonschema:"the name of the tool, resource or prompt to add"`
}

type promptArgs struct {
	Prompt string `json:"prompt" jsonschema:"what to ask the client's model"`
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// completions are the values the server completes each argument from.
var completions = map[string][]string{
	"ref/prompt greet name":                 {"Alice", "Bob", "Carol"},
	"ref/resource test://notes/{name} name": {"alpha", "beta", "gamma"},
}

// complete answers completion/complete from completions: the values
// that start with what the client typed; an unknown reference is an
// error.
func complete(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	ref := req.Params.Ref
	values, ok := completions[ref.Type+" "+ref.Name+ref.URI+" "+req.Params.Argument.Name]
	if !ok {
		return nil, fmt.Errorf("nothing to complete for %s %s%s argument %s", ref.Type, ref.Name, ref.URI, req.Params.Argument.Name)
	}
	out := []string{}
	for _, v := range values {
		if strings.HasPrefix(v, req.Params.Argument.Value) {
			out = append(out, v)
		}
	}
	return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: out, Total: len(out)}}, nil
}

// said says a subscription on standard error, so that a test sees it.
func said(method, uri string) error {
	fmt.Fprintf(os.Stderr, "gomcpserver %d: %s %s\n", os.Getpid(), method, uri)
	return nil
}

type stepsArgs struct {
	Steps int `json:"steps" jsonschema:"how many progress notifications to send"`
}

func newServer(versions []string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "gomcpserver", Version: "1"}, &mcp.ServerOptions{
		SupportedProtocolVersions: versions,
		CompletionHandler:         complete,
		SubscribeHandler: func(_ context.Context, req *mcp.SubscribeRequest) error {
			return said("resources/subscribe", req.Params.URI)
		},
		UnsubscribeHandler: func(_ context.Context, req *mcp.UnsubscribeRequest) error {
			return said("resources/unsubscribe", req.Params.URI)
		},
	})
	// Each tool call is said on standard error, so that a test sees which
	// tools ran.
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			p, ok := req.GetParams().(*mcp.CallToolParamsRaw)
			if ok {
				fmt.Fprintf(os.Stderr, "gomcpserver %d: tools/call %s\n", os.Getpid(), p.Name)
			}
			res, err := next(ctx, method, req)
			if ok && err != nil {
				fmt.Fprintf(os.Stderr, "gomcpserver %d: tools/call %s failed: %v\n", os.Getpid(), p.Name, err)
			}
			return res, err
		}
	})
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echoes back the input string, after delay_ms"},
		func(ctx context.Context, _ *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
			select {
			case <-time.After(time.Duration(a.DelayMS) * time.Millisecond):
				return text("Echo: " + a.Message), nil, nil
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		})
	mcp.AddTool(s, &mcp.Tool{Name: "sleep", Description: "Sleeps ms milliseconds, or until the call is cancelled"},
		func(ctx context.Context, _ *mcp.CallToolRequest, a sleepArgs) (*mcp.CallToolResult, any, error) {
			fmt.Fprintf(os.Stderr, "gomcpserver %d: sleeping %d ms\n", os.Getpid(), a.MS) // a test waits for this line
			select {
			case <-time.After(time.Duration(a.MS) * time.Millisecond):
				return text(fmt.Sprintf("slept %d ms", a.MS)), nil, nil
			case <-ctx.Done():
				fmt.Fprintf(os.Stderr, "gomcpserver %d: sleep cancelled\n", os.Getpid()) // and for this one
				return nil, nil, ctx.Err()
			}
		})
	mcp.AddTool(s, &mcp.Tool{Name: "pid", Description: "Returns the server's process id"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return text(strconv.Itoa(os.Getpid())), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "add_tool", Description: "Adds a tool that echoes, named name (the server then sends notifications/tools/list_changed)"},
		func(_ context.Context, _ *mcp.CallToolRequest, a nameArgs) (*mcp.CallToolResult, any, error) {
			mcp.AddTool(s, &mcp.Tool{Name: a.Name, Description: "Added by add_tool: echoes"},
				func(_ context.Context, _ *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
					return text("Echo: " + a.Message), nil, nil
				})
			return text("added " + a.Name), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "ask_llm", Description: "Asks the client's model (sampling/createMessage) and returns its answer"},
		func(ctx context.Context, req *mcp.CallToolRequest, a promptArgs) (*mcp.CallToolResult, any, error) {
			res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{
				MaxTokens: 100,
				Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: a.Prompt}}},
			})
			if err != nil {
				r := text("sampling failed: " + err.Error())
				r.IsError = true
				return r, nil, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{res.Content}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "ask_name", Description: "Asks its user for a name (elicitation) and greets it"},
		func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			answer, ok := req.Params.InputResponses["name"]
			if !ok {
				return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"name": &mcp.ElicitParams{
					Message: "What is your name?",
					RequestedSchema: &jsonschema.Schema{Type: "object", Required: []string{"name"},
						Properties: map[string]*jsonschema.Schema{"name": {Type: "string"}}},
				}}, RequestState: "asked"}, nil, nil
			}
			res, _ := answer.(*mcp.ElicitResult)
			if res == nil || res.Action != "accept" {
				action := "nothing"
				if res != nil {
					action = res.Action
				}
				return text("no name: the user chose to " + action), nil, nil
			}
			return text(fmt.Sprintf("Hello, %v (state %s)", res.Content["name"], req.Params.RequestState)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "ask_url", Description: "Asks its user to open a URL (URL-mode elicitation, MCP 2025-11-25), then says the elicitation is complete"},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Mode: "url", URL: "https://example.com/consent", ElicitationID: "consent-1",
				Message: "Please consent at the link."})
			if err != nil {
				return nil, nil, err
			}
			_ = req.Session.NotifyElicitationComplete(ctx, &mcp.ElicitationCompleteParams{ElicitationID: "consent-1"})
			return text("the user chose to " + res.Action), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "ask_many", Description: "Asks its user n questions at once (input requests), and says how many were answered"},
		func(_ context.Context, req *mcp.CallToolRequest, a stepsArgs) (*mcp.CallToolResult, any, error) {
			if len(req.Params.InputResponses) > 0 {
				return text(fmt.Sprintf("%d answered", len(req.Params.InputResponses))), nil, nil
			}
			asks := mcp.InputRequestMap{}
			for i := range a.Steps {
				asks[fmt.Sprint("q", i)] = &mcp.ElicitParams{Message: fmt.Sprint("question ", i),
					RequestedSchema: &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"x": {Type: "string"}}}}
			}
			return &mcp.CallToolResult{InputRequests: asks}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "progress", Description: "Sends steps progress notifications, then answers"},
		func(ctx context.Context, req *mcp.CallToolRequest, a stepsArgs) (*mcp.CallToolResult, any, error) {
			token := req.Params.GetProgressToken()
			for i := 1; i <= a.Steps && token != nil; i++ {
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token,
					Progress: float64(i), Total: float64(a.Steps), Message: fmt.Sprintf("step %d", i)})
			}
			return text(fmt.Sprintf("%d steps", a.Steps)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "meta", Description: "Returns the call's params._meta as it came"},
		func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			b, _ := json.Marshal(req.Params.Meta)
			return text(string(b)), nil, nil
		})
	s.AddResource(&mcp.Resource{URI: "test://greeting", Name: "greeting", MIMEType: "text/plain"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: "hello"}}}, nil
		})
	s.AddPrompt(&mcp.Prompt{Name: "greet", Arguments: []*mcp.PromptArgument{{Name: "name", Required: true}}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{
				{Role: "user", Content: &mcp.TextContent{Text: "Say hello to " + req.Params.Arguments["name"]}},
				{Role: "user", Content: &mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "test://greeting", MIMEType: "text/plain", Text: "hello"}}},
			}}, nil
		})
	var counter atomic.Int64
	s.AddResource(&mcp.Resource{URI: "test://counter", Name: "counter", MIMEType: "text/plain", Description: "A count that bump adds one to; subscribe to hear of it"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: fmt.Sprintf("count %d", counter.Load())}}}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "bump", Description: "Adds one to the counter (test://counter), and tells its subscribers"},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			n := counter.Add(1)
			if err := s.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: "test://counter"}); err != nil {
				return nil, nil, err
			}
			return text(fmt.Sprintf("count %d", n)), nil, nil
		})
	s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "test://notes/{name}", Name: "note", MIMEType: "text/plain", Description: "The note called name"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			name := strings.TrimPrefix(req.Params.URI, "test://notes/")
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: "note " + name}}}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "add_resource", Description: "Adds the resource test://added/NAME (the server then sends notifications/resources/list_changed)"},
		func(_ context.Context, _ *mcp.CallToolRequest, a nameArgs) (*mcp.CallToolResult, any, error) {
			uri := "test://added/" + a.Name
			s.AddResource(&mcp.Resource{URI: uri, Name: a.Name, MIMEType: "text/plain"},
				func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
					return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "added " + a.Name}}}, nil
				})
			return text("added " + uri), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "add_prompt", Description: "Adds a prompt named name (the server then sends notifications/prompts/list_changed)"},
		func(_ context.Context, _ *mcp.CallToolRequest, a nameArgs) (*mcp.CallToolResult, any, error) {
			s.AddPrompt(&mcp.Prompt{Name: a.Name}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
				return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "added " + a.Name}}}}, nil
			})
			return text("added prompt " + a.Name), nil, nil
		})
	return s
}
