package mcpendpoint

import (
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"
)

// hostileServers are participant ids a server may join with: the URI
// scheme's separators, escapes, non-ASCII, the inbox's words.
var hostileServers = []string{
	"files", "my_bot", "a/b", "a%2Fb", "%", "ü-ß", "servers", "inbox", "a b", "x?y#z", "{id}", "..", "~.-_",
	strings.Repeat("s", 300),
}

// hostileURIs are URIs a server may give its resources.
var hostileURIs = []string{
	"test://greeting",
	"demo://resource/static/document/architecture.md",
	"file:///home/a%20b/c.txt",
	"mcpp://pods/other/servers/evil/x",           // our own scheme, another pod and server
	"mcpp://pods/lab/inbox/alice",                // the inbox's
	"/servers/x/servers/y/",                      // the separators alone
	"x://h/a?b=c&d=%2F#frag#again",               // query, escapes, two #
	"ü://ä/ö?é=ß",                                // non-ASCII
	"http://[::1]:8080/a%zz",                     // an IPv6 host and a broken escape
	"%2F%252F",                                   // escapes of escapes
	"a b\tc",                                     // white space
	strings.Repeat("very/long/", 10_000) + "end", // 100 kB
}

// TestServerURI: the host's URI of a server's resource says the pod and
// the server, and reads back into exactly the server's URI, whatever the
// server and the URI hold; it is never an inbox, and a URI that is not
// written as the gateway writes it names nothing.
func TestServerURI(t *testing.T) {
	inbox := uritemplate.MustNew(inboxTemplate).Regexp()
	for _, server := range hostileServers {
		for _, uri := range hostileURIs {
			got := serverURI("lab", server, uri)
			if !strings.HasPrefix(got, "mcpp://pods/lab/servers/") {
				t.Fatalf("serverURI(lab, %q, …) = %.80q", server, got)
			}
			p, s, u, ok := parseServerURI(got)
			if !ok || p != "lab" || s != server || u != uri {
				t.Fatalf("parseServerURI(%.80q) = %q %q %.80q %v, want lab %q %.80q", got, p, s, u, ok, server, uri)
			}
			if inbox.MatchString(got) {
				t.Fatalf("%.80q is read as an inbox", got)
			}
			if p, id, ok := parseInbox(got); ok && p == "lab" {
				t.Fatalf("%.80q passes for the inbox of %q", got, id)
			}
		}
		// The server's segment holds unreserved characters and escapes
		// alone: no separator of the scheme, nothing a template expands.
		seg := strings.TrimSuffix(strings.TrimPrefix(serverURIPrefix("lab", server), "mcpp://pods/lab/servers/"), "/")
		if strings.Trim(seg, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~%") != "" {
			t.Fatalf("the segment of %q is %q", server, seg)
		}
	}
	for _, bad := range []string{
		"mcpp://pods/lab/servers/files",             // no URI
		"mcpp://pods/lab/servers/files/",            // an empty URI
		"mcpp://pods/lab/servers//test://greeting",  // no server
		"mcpp://pods/lab/servers/%66iles/x",         // "files" spelt another way
		"mcpp://pods/lab/servers/a%2fb/x",           // lower-case escape
		"mcpp://pods/lab/servers/a%zz/x",            // a broken escape
		"mcpp://pods/lab/servers/a b/x",             // unescaped space
		"mcpp://pods/lab/inbox/alice",               // the inbox
		"mcpp://pods/l@b/servers/files/x",           // not a pod's name
		"mcpp://pods/lab/server/files/x",            // not "servers"
		"mcpp:/pods/lab/servers/files/x",            // not the scheme
		"test://greeting",                           // the server's own URI
		"MCPP://PODS/lab/servers/files/test://x",    // another case
		"mcpp://pods/lab/servers/files%2Ftest://x/", // the separator escaped
	} {
		if p, s, u, ok := parseServerURI(bad); ok {
			t.Errorf("parseServerURI(%q) = %q %q %q, want refused", bad, p, s, u)
		}
	}
}

// TestServerURITemplate: a server's URI template, written as the host's,
// stays a template; what a host expands it to reads back into exactly
// what the host would have sent the server expanding the server's own,
// and the SDK finds the host's expansion under the template (its
// resources/read lookup), whatever the values hold.
func TestServerURITemplate(t *testing.T) {
	templates := []string{
		"demo://resource/dynamic/text/{resourceId}", // server-everything's
		"demo://resource/dynamic/blob/{resourceId}",
		"test://notes/{name}",
		"file:///{a}/{b}", // a separator between two expressions
		"file://{+path}",  // reserved expansion: separators stay
		"x://h{/segs*}{?q,r}{&s}{#frag}",
		"x://{.ext}/{;p}",
		"mcpp://pods/{pod}/inbox/{participant}", // the inbox's, as a server's
	}
	values := []uritemplate.Values{
		{"resourceId": uritemplate.String("7")},
		{"resourceId": uritemplate.String("a/b"), "name": uritemplate.String("ü ß"), "a": uritemplate.String("x/y"), "b": uritemplate.String("z")},
		{"a": uritemplate.String("x"), "b": uritemplate.String("y/z"), "path": uritemplate.String("/etc/%2F/servers/x")},
		{"segs": uritemplate.List("a", "b/c"), "q": uritemplate.String("1&2"), "r": uritemplate.String(""), "s": uritemplate.String("%"), "frag": uritemplate.String("#x")},
		{"ext": uritemplate.String("tar.gz"), "p": uritemplate.String("v;w"), "pod": uritemplate.String("lab"), "participant": uritemplate.String("alice")},
		{"name": uritemplate.String(strings.Repeat("long/", 2_000)), "resourceId": uritemplate.String("mcpp://pods/x/servers/y/z")},
	}
	for _, server := range hostileServers {
		for _, tmpl := range templates {
			mapped := serverURI("lab", server, tmpl)
			hostT, err := uritemplate.New(mapped)
			if err != nil {
				t.Fatalf("%q is not a template: %v", mapped, err)
			}
			serverT := uritemplate.MustNew(tmpl)
			for _, v := range values {
				host, err := hostT.Expand(v)
				if err != nil {
					t.Fatal(err)
				}
				want, err := serverT.Expand(v)
				if err != nil {
					t.Fatal(err)
				}
				_, s, got, ok := parseServerURI(host)
				if !ok || s != server || got != want {
					t.Fatalf("template %q of %q, values %v: the host's %.100q reads back as %q %.100q %v, want %.100q", tmpl, server, v, host, s, got, ok, want)
				}
				if !hostT.Regexp().MatchString(host) {
					t.Fatalf("the SDK would not find %.100q under %.100q", host, mapped)
				}
			}
		}
	}
}

// TestServerURIsTheSDKTakes: the SDK lists every host URI and template
// of a well-formed server URI (AddResource and AddResourceTemplate panic
// on one they refuse, which the gateway then does not list).
func TestServerURIsTheSDKTakes(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "t"}, nil)
	for _, server := range hostileServers {
		for _, uri := range []string{"test://greeting", "file:///home/a%20b/c.txt", "ü://ä/ö?é=ß", "x://h/a?b=c&d=%2F#frag#again", "a b"} {
			s.AddResource(&mcp.Resource{URI: serverURI("lab", server, uri), Name: "r"}, nil)
		}
		s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: serverURI("lab", server, "x://h{/segs*}{?q,r}"), Name: "t"}, nil)
	}
}
