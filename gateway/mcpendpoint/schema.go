package mcpendpoint

import (
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/mcpp/gateway/wire"
)

// schemaFor derives the JSON Schema of T, as the SDK would, with three
// changes: a json.RawMessage is any JSON value (not an array of bytes), a
// capability is what it marshals to (a kind pattern, or a {kind, payload}
// object), and a slice is an array (the gateway never sends null for one,
// and an argument is left out rather than null). edit then adds what Go
// types cannot say: defaults, bounds, enums.
func schemaFor[T any](edit func(props map[string]*jsonschema.Schema)) *jsonschema.Schema {
	s, err := jsonschema.For[T](&jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[json.RawMessage](): {},
		reflect.TypeFor[wire.Capability](): capabilitySchema(),
	}})
	if err != nil {
		panic(fmt.Sprintf("mcpendpoint: the MCP schema of %T: %v", *new(T), err)) // a bug in types.go or wire's tags, met at start
	}
	arrays(s)
	if edit != nil {
		edit(s.Properties)
	}
	return s
}

// capabilitySchema is a capability pattern (docs/protocol.md section 2).
func capabilitySchema() *jsonschema.Schema {
	return &jsonschema.Schema{
		Description: "a kind pattern (* matches all, mcp/* a prefix), or {kind, payload} whose payload pattern the payload must match too",
		AnyOf: []*jsonschema.Schema{
			{Type: "string"},
			{Type: "object", Required: []string{"kind"}, Properties: map[string]*jsonschema.Schema{
				"kind": {Type: "string"}, "payload": {},
			}},
		},
	}
}

// arrays makes every nullable array of s a plain array.
func arrays(s *jsonschema.Schema) {
	if len(s.Types) == 2 && s.Types[0] == "null" && s.Types[1] == "array" {
		s.Type, s.Types = "array", nil
	}
	if s.Items != nil {
		arrays(s.Items)
	}
	for _, p := range s.Properties {
		arrays(p)
	}
}

// resultSchema is a tool's output schema: its result, or a refusal (a call
// with isError set carries the refusal in its structured content).
func resultSchema(ok *jsonschema.Schema) *jsonschema.Schema {
	refusal := schemaFor[wire.ErrorPayload](nil)
	refusal.AdditionalProperties = nil // details, e.g. context_limit_exceeded's limit and scope
	return &jsonschema.Schema{
		Type:        "object",
		Description: "the result; when the call is refused (isError), the refusal instead",
		AnyOf:       []*jsonschema.Schema{ok, refusal},
	}
}

// effectiveFilterSchema is pod_filter's result: a wire.Filter with every
// field set (the effective filter, as the welcome shows it), where
// gateway/filter's payload may leave any out.
func effectiveFilterSchema() *jsonschema.Schema {
	s := schemaFor[wire.Filter](nil)
	s.Required = append([]string(nil), s.PropertyOrder...)
	for _, p := range s.Properties {
		if len(p.Types) == 2 && p.Types[0] == "null" {
			p.Type, p.Types = p.Types[1], nil
		}
	}
	return s
}

// Small builders for edit.

func withDefault(p *jsonschema.Schema, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	p.Default = b
}

func withRange(p *jsonschema.Schema, lo, hi float64) {
	p.Minimum, p.Maximum = &lo, &hi
}

func withEnum(p *jsonschema.Schema, values ...string) {
	for _, v := range values {
		p.Enum = append(p.Enum, v)
	}
}

// contextSchema is pod_send's context: an object or a path
// (docs/protocol.md section 3).
func contextSchema(description string) *jsonschema.Schema {
	str := &jsonschema.Schema{Type: "string", Description: "a path: segments of [A-Za-z0-9_-] joined by /, each segment a child of the one before"}
	obj := &jsonschema.Schema{Type: "object", Required: []string{"id"}, Properties: map[string]*jsonschema.Schema{
		"id":       {Type: "string", Description: "the sub-context's id (1 to 256 bytes)"},
		"type":     {Type: "string", Description: "its type, e.g. reasoning; given when it opens, then may be left out"},
		"parent":   {Type: "string", Description: "its parent sub-context's id; given when it opens, then may be left out"},
		"metadata": {Type: "object", Description: "anything, relayed as is"},
	}}
	obj.AdditionalProperties = &jsonschema.Schema{Not: &jsonschema.Schema{}} // false: no other key
	return &jsonschema.Schema{Description: description, AnyOf: []*jsonschema.Schema{obj, str}}
}

// correlationSchema is pod_send's correlation_id: one id or several.
func correlationSchema(description string) *jsonschema.Schema {
	return &jsonschema.Schema{Description: description, AnyOf: []*jsonschema.Schema{
		{Type: "string"},
		{Type: "array", Items: &jsonschema.Schema{Type: "string"}},
	}}
}

// lifecycleSchema is pod_send's lifecycle (docs/protocol.md section 8).
func lifecycleSchema(description string) *jsonschema.Schema {
	mode := &jsonschema.Schema{Type: "string", Description: "durable (default), transient or ephemeral"}
	withEnum(mode, "durable", "transient", "ephemeral")
	return &jsonschema.Schema{Type: "object", Description: description,
		AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}},
		Properties: map[string]*jsonschema.Schema{
			"mode":     mode,
			"summary":  {Type: "string", Description: "with transient only: what replaces the payload once consumed (1 to 1024 bytes)"},
			"consumes": {Type: "array", Items: &jsonschema.Schema{Type: "string"}, Description: "ids of earlier transient envelopes this one consumes (1 to 64)"},
		}}
}
