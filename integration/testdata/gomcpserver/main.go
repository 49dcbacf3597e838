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
// Tools: echo (its message back, after delay_ms), sleep (ms
// milliseconds, or until cancelled; it says so on standard error), pid (the server's process id, so that a test can kill it),
// add_tool (adds a tool: the server sends notifications/tools/
// list_changed), ask_llm (asks the client for a completion,
// sampling/createMessage, and reports what came back), bump (adds one
// to the counter: the server sends notifications/resources/updated of
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

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	addr := flag.String("http", "", "serve Streamable HTTP on this address instead of stdio")
	flag.Parse()
	server := newServer()
	if *addr == "" {
		if err := server.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			log.Fatal(err)
		}
		return
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "listening on http://%s/mcp\n", ln.Addr())
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
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

func newServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "gomcpserver", Version: "1"}, &mcp.ServerOptions{
		CompletionHandler: complete,
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
			if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
				fmt.Fprintf(os.Stderr, "gomcpserver %d: tools/call %s\n", os.Getpid(), p.Name)
			}
			return next(ctx, method, req)
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
