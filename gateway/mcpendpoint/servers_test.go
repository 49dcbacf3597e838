package mcpendpoint

import "testing"

// TestExposedName: a host's name for a server's tool is within MCP's
// tool-name rules, and the server's participant id reads back from it
// exactly, whatever the id holds.
func TestExposedName(t *testing.T) {
	for _, tc := range []struct{ server, tool, want string }{
		{"files", "read_file", "files__read_file"},
		{"my_bot", "echo", "my_5fbot__echo"},
		{"a@b:c", "x", "a_40b_3ac__x"},
		{"a__b", "t__u", "a_5f_5fb__t__u"},
		{"s", "tool/with/slashes", "s__tool_2fwith_2fslashes"},
		{"s.1-2", "T.9-x", "s.1-2__T.9-x"},
	} {
		got, ok := exposedName(tc.server, tc.tool)
		if !ok || got != tc.want {
			t.Errorf("exposedName(%q, %q) = %q %v, want %q", tc.server, tc.tool, got, ok, tc.want)
			continue
		}
		for _, r := range got {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
				t.Errorf("%q holds %q, outside MCP's tool-name characters", got, r)
			}
		}
		if back, ok := serverOf(got); !ok || back != tc.server {
			t.Errorf("serverOf(%q) = %q %v, want %q", got, back, ok, tc.server)
		}
	}
	long := make([]byte, 122) // "files__" and 122 bytes: 129
	for i := range long {
		long[i] = 'x'
	}
	if _, ok := exposedName("files", string(long)); ok {
		t.Error("a name over 128 bytes is listed")
	}
	if _, ok := exposedName("files", ""); ok {
		t.Error("a tool without a name is listed")
	}
}
