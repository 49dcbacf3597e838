package capability_test

import (
	"encoding/json"
	"fmt"

	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/wire"
)

// A capability list as a token file or a JWT carries it: compiled once,
// checked for every envelope.
func Example() {
	var caps []wire.Capability
	_ = json.Unmarshal([]byte(`["chat", "reasoning/*",
		{"kind": "mcp/request", "payload": {"method": "tools/call", "params": {"name": "read_*"}}}]`), &caps)
	set, err := capability.Compile(caps)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(set.Allows("chat", []byte(`{"text": "hi"}`)))
	fmt.Println(set.Allows("mcp/request", []byte(`{"method": "tools/call", "params": {"name": "read_file"}}`)))
	fmt.Println(set.Allows("mcp/request", []byte(`{"method": "tools/call", "params": {"name": "delete_file"}}`)))
	fmt.Println(set.Allows("system/welcome", nil))
	// Output:
	// true
	// true
	// false
	// false
}

// Compile names what it refuses, and where.
func ExampleCompile_error() {
	_, err := capability.Compile([]wire.Capability{
		{Kind: "chat"},
		{Kind: "mcp/request", Payload: json.RawMessage(`{"params": {"$.name": "read_*"}}`)},
	})
	fmt.Println(err)
	// Output:
	// capability 1 (kind "mcp/request"): payload.params.$.name: not supported: JSONPath keys ("$.name")
}

// A grant scoped to a context holds in that context and below it, until
// the context concludes.
func ExampleGrants() {
	var pod capability.PodGrants
	bob := pod.For("bob")
	_ = bob.Add(capability.Grant{
		ID:           "grant-789", // the capability/grant envelope's id
		Grantor:      "alice",
		Context:      "task-1",
		Capabilities: capability.MustCompile(wire.Kinds("mcp/*")),
	})
	fmt.Println(bob.Allows("mcp/request", nil, capability.Where{Context: "step-2", Ancestors: []string{"task-1"}}))
	fmt.Println(bob.Allows("mcp/request", nil, capability.Where{Context: "other"}))
	for _, e := range pod.EndContext("task-1") { // task-1 concluded
		fmt.Println("tell", e.Recipient, "that", e.ID, "ended")
	}
	fmt.Println(bob.Allows("mcp/request", nil, capability.Where{Context: "step-2", Ancestors: []string{"task-1"}}))
	// Output:
	// true
	// false
	// tell bob that grant-789 ended
	// false
}
