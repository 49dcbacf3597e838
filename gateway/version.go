package gateway

import "runtime/debug"

// version is set at link time (-ldflags "-X github.com/mcpp/gateway/gateway.version=v1.2.3");
// without it, Version reads the module version and VCS revision Go
// records in the binary.
var version = ""

// Version is the gateway's version: the release it was built as, or the
// commit it was built from.
func Version() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := info.Main.Version
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+dirty"
			}
		}
	}
	switch {
	case rev != "" && (v == "" || v == "(devel)"):
		if len(rev) > 12 {
			rev = rev[:12]
		}
		return "devel-" + rev + modified
	case v != "":
		return v
	}
	return "(devel)"
}
