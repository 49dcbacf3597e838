package gateway

import (
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/mcpp/gateway/audit"
	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/limits"
	"github.com/mcpp/gateway/pod"
	"github.com/mcpp/gateway/tokens"
	"github.com/mcpp/gateway/wire"
)

// Config holds every setting of the gateway. Each field is a flag of
// mcpp-gateway (RegisterFlags) and an MCPP_ environment variable.
type Config struct {
	Listen           string
	Tokens           string
	JWTSecretFile    string
	JWTPublicKeyFile string
	JWTJWKSURL       string
	JWTIssuer        string
	JWTAudience      string
	// DefaultCapabilities are the capabilities in open mode and of a
	// token without its own; "" is DefaultCapabilitiesOpen in open mode
	// and DefaultCapabilitiesTokens where tokens are required.
	DefaultCapabilities string
	// JWTAllowNoExp accepts JWTs without exp (unsafe: such a token lives
	// until its key changes).
	JWTAllowNoExp  bool
	AllowedOrigins string

	// OAuthIssuers are the authorization servers whose access tokens the
	// gateway takes (--oauth-issuer [NAME=]URL, once per issuer), as an
	// OAuth resource server whose identifier is OAuthResource; the
	// scopes hosts ask for are OAuthScopes, and OAuthParticipantClaim
	// names the claim of a token's participant (docs/protocol.md
	// section 1, oauth.go).
	OAuthIssuers          FlagList
	OAuthResource         string
	OAuthScopes           string
	OAuthParticipantClaim string

	// TLSCert and TLSKey are PEM files: with both, the gateway serves
	// HTTPS and WSS only (reloaded on SIGHUP and when they change).
	TLSCert string
	TLSKey  string

	// Config is every limit (package limits): its flags are
	// mcpp-gateway's too, and its fields are read as the gateway's own
	// (cfg.Rate, cfg.MaxPods).
	limits.Config

	// MaxMemory is the soft limit of the process's memory, for Go's
	// garbage collector (0: none).
	MaxMemory limits.ByteSize

	PingInterval     time.Duration
	WriteTimeout     time.Duration
	HandshakeTimeout time.Duration
	ShutdownTimeout  time.Duration

	NATSPort int

	// HistoryDir keeps the history on disk (History, HistoryAge and
	// HistoryBytes, its limits, are in limits.Config); HistoryReplicas
	// is its copies.
	HistoryDir      string
	HistoryReplicas int
	// HistoryStore is where the embedded JetStream keeps a history that
	// does not survive a restart (no --history-dir): HistoryStoreFile, in
	// files of a temporary directory, out of the Go heap the collector
	// marks, or HistoryStoreMemory, in it.
	HistoryStore string
	// HistoryCache bounds the bytes of the history stream's messages the
	// node keeps in memory once it has them (history.Cache), so that
	// replays, resumes and history pages do not read them again (0:
	// none).
	HistoryCache limits.ByteSize

	ClusterName      string
	ClusterListen    string
	ClusterAdvertise string
	Routes           string
	NATSURL          string
	ClusterHeartbeat time.Duration

	// AuditLog is the file of the audit trail (docs/protocol.md section
	// 7), "-" for standard output, "" for none; AuditLogMaxSize (in
	// megabytes) and AuditLogMaxBackups rotate a file.
	AuditLog           string
	AuditLogMaxSize    int
	AuditLogMaxBackups int
	// MetricsMaxPods bounds the pods /metrics names (label pod); the
	// others are counted together as pod="other".
	MetricsMaxPods int

	// Logger receives the gateway's logs; nil means slog.Default().
	Logger *slog.Logger `flag:"-"`
	// TracerProvider makes the gateway's spans (docs/protocol.md section
	// 7, "Traces"); nil: tracing off. mcpp-gateway sets it from the
	// OTEL_* environment variables (package tracing).
	TracerProvider trace.TracerProvider `flag:"-"`
}

// DefaultConfig returns the defaults of docs/protocol.md sections 5 and 7
// (the limits' are limits.Default).
func DefaultConfig() Config {
	return Config{
		Config:                limits.Default(),
		Listen:                "127.0.0.1:8080",
		PingInterval:          30 * time.Second,
		WriteTimeout:          10 * time.Second,
		HandshakeTimeout:      10 * time.Second,
		ShutdownTimeout:       10 * time.Second,
		ClusterHeartbeat:      time.Second,
		HistoryStore:          HistoryStoreFile,
		HistoryCache:          DefaultHistoryCache,
		OAuthScopes:           DefaultOAuthScopes,
		OAuthParticipantClaim: tokens.DefaultOAuthParticipantClaim,
		AuditLogMaxSize:       DefaultAuditLogMaxSize,
		AuditLogMaxBackups:    DefaultAuditLogMaxBackups,
		MetricsMaxPods:        DefaultMetricsMaxPods,
	}
}

// Defaults of the audit trail's rotation (audit.DefaultMaxSizeMB: about a
// gigabyte and a tenth at most on disk) and of the pods named in
// /metrics: 100 pods of some 30 series each keep a scrape small at 6,000
// pods (pod.DefaultMetricsMaxPods).
const (
	DefaultAuditLogMaxSize    = audit.DefaultMaxSizeMB
	DefaultAuditLogMaxBackups = audit.DefaultMaxBackups
	DefaultMetricsMaxPods     = pod.DefaultMetricsMaxPods
	// DefaultHistoryCache is --history-bytes' default: a node may keep
	// the whole history of a default gateway in memory, as it fills
	// (historyCacheBytes caps it). Issue 38's full-size run: a thousand
	// joiners' replays read from the stream took over 30 s, and a cache
	// of 64 MiB, a third of that run's history, left most of them to it.
	DefaultHistoryCache = limits.DefaultHistoryBytes
)

// The stores of a history that does not survive a restart
// (--history-store). The history's messages in JetStream's memory store
// are three Go objects each, which every collection marks: at 6,000 pods
// they were most of the gateway's heap (BENCHMARKS.md). Its file store,
// in a temporary directory, keeps them in files (the page cache), out of
// the heap, and is the default.
const (
	HistoryStoreFile   = "file"
	HistoryStoreMemory = "memory"
)

// The default capabilities (--default-capabilities left empty): everything
// in open mode, for development; where tokens are required, a token
// without capabilities of its own (a JWT minted for another application,
// say) may chat and propose calls, which someone allowed must approve,
// and nothing more: no kick, no grant, no call.
const (
	DefaultCapabilitiesOpen   = "*"
	DefaultCapabilitiesTokens = "chat,mcp/proposal"
)

// RegisterFlags defines one flag per setting on fs, with c's values as
// defaults: the limits' (limits.Config.RegisterFlags) and the others.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Config.RegisterFlags(fs)
	fs.StringVar(&c.Listen, "listen", c.Listen, "address of the HTTP/WebSocket server")
	fs.StringVar(&c.Tokens, "tokens", c.Tokens, "token file (JSON); without one the gateway runs open, for development")
	fs.StringVar(&c.JWTSecretFile, "jwt-secret-file", c.JWTSecretFile, "file holding the HMAC secret of HS256/HS384/HS512 JWTs (at least 32 bytes)")
	fs.StringVar(&c.JWTPublicKeyFile, "jwt-public-key-file", c.JWTPublicKeyFile, "PEM file of the public keys (RSA, ECDSA, Ed25519) that JWTs are signed with")
	fs.StringVar(&c.JWTJWKSURL, "jwt-jwks-url", c.JWTJWKSURL, "URL of a JSON Web Key Set; fetched at start, hourly, on SIGHUP and when a token names an unknown kid")
	fs.StringVar(&c.JWTIssuer, "jwt-issuer", c.JWTIssuer, "the iss a JWT must have (empty: any)")
	fs.StringVar(&c.JWTAudience, "jwt-audience", c.JWTAudience, "an aud a JWT must list (empty: any)")
	fs.StringVar(&c.DefaultCapabilities, "default-capabilities", c.DefaultCapabilities, "capabilities in open mode and of JWTs without a caps claim: comma-separated kind patterns, or a JSON list of patterns and {kind, payload} objects (empty: "+DefaultCapabilitiesOpen+" in open mode, "+DefaultCapabilitiesTokens+" where tokens are required)")
	fs.BoolVar(&c.JWTAllowNoExp, "jwt-allow-no-exp", c.JWTAllowNoExp, "accept JWTs without an exp claim (unsafe: such a token is valid until its key changes)")
	fs.Var(&c.OAuthIssuers, "oauth-issuer", "an OAuth authorization server whose access tokens are taken, as URL or NAME=URL (its participants are NAME:sub; NAME defaults to the URL's host); give it once per issuer")
	fs.StringVar(&c.OAuthResource, "oauth-resource", c.OAuthResource, "the gateway's public https:// address, its OAuth resource identifier: access tokens must name it (or its /mcp) in aud (needed with --oauth-issuer)")
	fs.StringVar(&c.OAuthScopes, "oauth-scopes", c.OAuthScopes, "the scopes a host asks for besides the pod's own (mcpp:pod:NAME): its protected resource metadata's scopes_supported and each 401's scope")
	fs.StringVar(&c.OAuthParticipantClaim, "oauth-participant-claim", c.OAuthParticipantClaim, "the claim of an access token that names its participant, after its issuer's NAME and a colon")
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "PEM certificate chain: serve HTTPS and WSS (with --tls-key; reloaded on SIGHUP and when the files change)")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "PEM private key of --tls-cert")
	fs.StringVar(&c.AllowedOrigins, "allowed-origins", c.AllowedOrigins, "browser origins allowed besides the gateway's own host (comma-separated host patterns, e.g. app.example.com,*.example.org)")
	fs.Var(&c.MaxMemory, "max-memory", "soft limit of the process's memory, for Go's garbage collector (debug.SetMemoryLimit), e.g. 2GiB (0: none)")
	fs.DurationVar(&c.PingInterval, "ping-interval", c.PingInterval, "WebSocket ping interval (0 disables)")
	fs.DurationVar(&c.WriteTimeout, "write-timeout", c.WriteTimeout, "a write or ping to a participant may take this long before it is cut")
	fs.DurationVar(&c.HandshakeTimeout, "handshake-timeout", c.HandshakeTimeout, "time to send the HTTP upgrade request")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "on SIGTERM, time to deliver what is queued before connections are dropped")
	fs.IntVar(&c.NATSPort, "nats-port", c.NATSPort, "open the embedded NATS server's client port on 127.0.0.1 (0: no port)")
	fs.StringVar(&c.ClusterName, "cluster-name", c.ClusterName, "join the embedded NATS server to a cluster of gateways of this name")
	fs.StringVar(&c.ClusterListen, "cluster-listen", c.ClusterListen, "address the embedded NATS server takes cluster routes on (host:port)")
	fs.StringVar(&c.ClusterAdvertise, "cluster-advertise", c.ClusterAdvertise, "host:port the other gateways dial to reach this one's routes, when it is not --cluster-listen (behind NAT, a container's port mapping, a proxy)")
	fs.StringVar(&c.Routes, "routes", c.Routes, "other gateways' cluster addresses (comma-separated nats-route://host:port)")
	fs.StringVar(&c.NATSURL, "nats-url", c.NATSURL, "use this external NATS deployment instead of the embedded server (comma-separated nats:// URLs)")
	fs.DurationVar(&c.ClusterHeartbeat, "cluster-heartbeat", c.ClusterHeartbeat, "with several gateways: how often each announces itself; one silent for 3 heartbeats is gone, and its participants with it")
	fs.StringVar(&c.HistoryDir, "history-dir", c.HistoryDir, "keep the history on disk in this directory, so that it survives a restart (default: in memory)")
	fs.StringVar(&c.HistoryStore, "history-store", c.HistoryStore, "without --history-dir, where the embedded JetStream keeps the history: "+HistoryStoreFile+" (a temporary directory, removed at exit: out of the Go heap) or "+HistoryStoreMemory+" (the Go heap)")
	fs.Var(&c.HistoryCache, "history-cache", "bytes of the history's newest messages each node keeps in memory once it has them, so that replays and history pages do not read them from the stream again; at most --history-bytes and an eighth of the node's memory (0: none; below 64KiB: none)")
	fs.IntVar(&c.HistoryReplicas, "history-replicas", c.HistoryReplicas, "copies of the history over the embedded cluster's nodes (0: 1 alone, 3 or the cluster's size in a cluster)")
	fs.StringVar(&c.AuditLog, "audit-log", c.AuditLog, "write the audit trail (one JSON line per trust decision) to this file, or - for standard output (default: none)")
	fs.IntVar(&c.AuditLogMaxSize, "audit-log-max-size", c.AuditLogMaxSize, "megabytes at which the audit file is rotated")
	fs.IntVar(&c.AuditLogMaxBackups, "audit-log-max-backups", c.AuditLogMaxBackups, "rotated audit files kept (0: all)")
	fs.IntVar(&c.MetricsMaxPods, "metrics-max-pods", c.MetricsMaxPods, "pods named in /metrics' per-pod series; the others are counted together as pod=\"other\"")
}

// ApplyEnv sets every flag of fs that was not given on the command line
// from MCPP_<NAME> (upper case, "-" as "_"). The command line wins.
func ApplyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		name := EnvName(f.Name)
		if v, ok := lookup(name); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, e)
			}
		}
	})
	return err
}

// EnvName is the environment variable of a flag.
func EnvName(flagName string) string {
	return "MCPP_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Validate reports settings that cannot work: the limits first
// (limits.Config.Validate), then the others.
func (c *Config) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	switch {
	case (c.ClusterName != "" || c.ClusterListen != "" || c.ClusterAdvertise != "" || c.Routes != "") && c.NATSURL != "":
		return fmt.Errorf("--nats-url uses an external NATS; --cluster-name, --cluster-listen, --cluster-advertise and --routes are for the embedded one")
	case (c.ClusterListen != "" || c.ClusterAdvertise != "" || c.Routes != "") && c.ClusterName == "":
		return fmt.Errorf("--cluster-listen, --cluster-advertise and --routes need --cluster-name")
	case c.ClusterAdvertise != "" && !validHostPort(c.ClusterAdvertise):
		return fmt.Errorf("--cluster-advertise must be host:port with a port from 1 to 65535, not %q", c.ClusterAdvertise)
	case c.ClusterName != "" && c.ClusterListen == "":
		return fmt.Errorf("--cluster-name needs --cluster-listen")
	case c.defaultCapabilitiesError() != nil:
		return fmt.Errorf("--default-capabilities: %w", c.defaultCapabilitiesError())
	case !validPatterns(c.AllowedOrigins):
		return fmt.Errorf("--allowed-origins: a pattern is malformed (path.Match syntax)")
	case c.ClusterHeartbeat < 10*time.Millisecond:
		return fmt.Errorf("--cluster-heartbeat must be at least 10ms")
	case c.HistoryCache < 0:
		return fmt.Errorf("--history-cache must be 0 (none) or more")
	case c.HistoryReplicas < 0 || c.HistoryReplicas > 5:
		return fmt.Errorf("--history-replicas must be 0 (automatic) to 5")
	case c.HistoryReplicas > 1 && c.ClusterName == "" && c.NATSURL == "":
		return fmt.Errorf("--history-replicas above 1 needs a cluster (--cluster-name) or an external NATS (--nats-url)")
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return fmt.Errorf("--tls-cert and --tls-key go together")
	case c.HistoryStore != HistoryStoreFile && c.HistoryStore != HistoryStoreMemory:
		return fmt.Errorf("--history-store must be %s or %s", HistoryStoreFile, HistoryStoreMemory)
	case c.History == 0 && (c.HistoryDir != "" || c.HistoryReplicas > 0):
		return fmt.Errorf("--history-dir and --history-replicas need history on (--history above 0)")
	case c.oauthError() != nil:
		return c.oauthError()
	case c.AuditLog != "" && audit.CheckPath(c.AuditLog) != nil:
		return fmt.Errorf("--audit-log: %w", audit.CheckPath(c.AuditLog))
	case c.AuditLogMaxSize < 1:
		return fmt.Errorf("--audit-log-max-size must be at least 1 (megabytes)")
	case c.AuditLogMaxBackups < 0:
		return fmt.Errorf("--audit-log-max-backups must be 0 (keep every rotated file) or more")
	case c.MetricsMaxPods < 0:
		return fmt.Errorf("--metrics-max-pods must be 0 (every pod counted as other) or more")
	}
	return nil
}

// defaultCapabilities reads --default-capabilities: a JSON list when it
// starts with "[" (payload patterns need one), comma-separated kind
// patterns otherwise; empty is the default of the mode.
func (c *Config) defaultCapabilities() ([]wire.Capability, error) {
	s := strings.TrimSpace(c.DefaultCapabilities)
	if s == "" {
		s = DefaultCapabilitiesOpen
		if c.tokensRequired() {
			s = DefaultCapabilitiesTokens
		}
	}
	if strings.HasPrefix(s, "[") {
		var caps []wire.Capability
		if err := json.Unmarshal([]byte(s), &caps); err != nil {
			return nil, err
		}
		return caps, nil
	}
	return wire.Kinds(splitComma(s)...), nil
}

func (c *Config) defaultCapabilitiesError() error {
	caps, err := c.defaultCapabilities()
	if err == nil {
		_, err = capability.Compile(caps)
	}
	if err == nil && holdsAdmin(caps) {
		// Every JWT without a caps claim would operate every pod of its
		// own (docs/protocol.md section 7, the operator's API).
		err = fmt.Errorf("%s is never a default: give it in the tokens of those who operate the gateway", wire.CapabilityAdmin)
	}
	return err
}

// tokensRequired reports whether every join and publish needs a token.
func (c *Config) tokensRequired() bool { return c.Tokens != "" || c.jwtOn() || c.oauthOn() }

// jwtOn reports whether JWTs are verified.
func (c *Config) jwtOn() bool {
	return c.JWTSecretFile != "" || c.JWTPublicKeyFile != "" || c.JWTJWKSURL != ""
}

// historyOn reports whether pods keep a history.
func (c *Config) historyOn() bool { return c.History > 0 }

func validPatterns(list string) bool {
	for _, p := range splitComma(list) {
		if _, err := path.Match(p, ""); err != nil {
			return false
		}
	}
	return true
}

// validHostPort reports whether s is host:port with a host and a port
// from 1 to 65535: an address another node can dial.
func validHostPort(s string) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}

// clustered reports whether other gateway nodes may share the pods.
func (c *Config) clustered() bool { return c.ClusterName != "" || c.NATSURL != "" }

// ownsHistory reports whether this node's history stream is written by
// its writer alone (history.Config.Own), which then sends rounds with one
// acknowledgement each: a node alone, whose embedded server has no port
// (--nats-port) through which anyone else could publish into the stream.
// A round's messages are placed by counting the stream's sequences, and
// a message of someone else's could make up for one the stream refused
// without a word.
func (c *Config) ownsHistory() bool { return !c.clustered() && c.NATSPort == 0 }

// readLimit is the largest message read before the connection is closed
// with 1009: twice the envelope limit, and at least the limit plus 64 KiB,
// so that a moderately oversized envelope gets message_too_large and the
// connection stays open (docs/protocol.md section 5).
func (c *Config) readLimit() int64 {
	return int64(max(2*c.MaxMessageBytes, c.MaxMessageBytes+64<<10))
}

func splitComma(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func (c *Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.New(slog.NewTextHandler(os.Stderr, nil))
}

// podBytes is what a pod costs the node, with its connections (three
// participants, a few contexts and envelopes of history), as mcpp bench
// --pods measures it: what --max-pods 0 counts with.
const podBytes = 64 << 10

// historyCacheBytes is the node's cache of history messages: at most
// --history-cache, --history-bytes (the stream holds no more) and an
// eighth of the node's memory (--max-memory, or the machine's or its
// cgroup's), so that a default never takes the memory pods need.
func (c *Config) historyCacheBytes() int {
	mem := int64(c.MaxMemory)
	if mem == 0 {
		mem = machineMemory()
	}
	return int(min(int64(c.HistoryCache), int64(c.HistoryBytes), mem/8))
}

// PodsMemoryHolds is --max-pods when it is 0: the pods a quarter of the
// node's memory holds at podBytes a pod (the rest is for the queues, the
// history and the garbage collector's headroom), counting --max-memory
// when it is set, or the machine's (or its cgroup's) memory otherwise; at
// least 1,000, the limit of earlier versions.
func (c *Config) PodsMemoryHolds() int {
	if c.MaxPods > 0 {
		return c.MaxPods
	}
	mem := int64(c.MaxMemory)
	if mem == 0 {
		mem = machineMemory()
	}
	return max(1000, int(mem/4/podBytes))
}

// machineMemory is the memory the process may use: its cgroup's limit,
// or the machine's total, or 4 GiB when neither can be read.
func machineMemory() int64 {
	total := int64(4 << 30)
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				if kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64); err == nil {
					total = kb << 10
				}
			}
		}
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if limit, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && limit < total {
			total = limit
		}
	}
	return total
}
