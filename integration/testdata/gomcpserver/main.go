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
// sampling/createMessage, and reports what came back). One resource
// (test://greeting) and one prompt (greet). Each tool call is said on
// standard error ("gomcpserver PID: tools/call NAME").
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
	Name string `json:"name" jsonschema:"the new tool's name"`
}

type promptArgs struct {
	Prompt string `json:"prompt" jsonschema:"what to ask the client's model"`
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func newServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "gomcpserver", Version: "1"}, nil)
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
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "Say hello to " + req.Params.Arguments["name"]}}}}, nil
		})
	return s
}
