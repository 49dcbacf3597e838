package gateway

import (
	"flag"
	"math"
	"strings"
	"testing"
	"time"
)

func TestConfigEnvironment(t *testing.T) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("mcpp-gateway", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--rate", "11", "--context-timeout=45s"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"MCPP_RATE":                     "7",   // the flag wins
		"MCPP_CONTEXT_TIMEOUT":          "90s", // the flag wins
		"MCPP_BURST":                    "9",
		"MCPP_MAX_DEPTH":                "3",
		"MCPP_MAX_CONTEXTS_PER_POD":     "77",
		"MCPP_CONTEXT_CREATE_RATE":      "2.5",
		"MCPP_MAX_PARTICIPANTS_PER_POD": "4",
		"MCPP_CONCLUSION_KINDS":         "done",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := ApplyEnv(fs, lookup); err != nil {
		t.Fatal(err)
	}
	if cfg.Rate != 11 || cfg.ContextTimeout != 45*time.Second {
		t.Fatalf("the environment overrode flags: rate %v, context timeout %v", cfg.Rate, cfg.ContextTimeout)
	}
	if cfg.Burst != 9 || cfg.MaxDepth != 3 || cfg.MaxContextsPerPod != 77 || cfg.ContextCreateRate != 2.5 ||
		cfg.MaxParticipantsPerPod != 4 || cfg.ConclusionKinds != "done" {
		t.Fatalf("the environment was not applied: %+v", cfg)
	}
	if cfg.MaxConnections != 10000 || cfg.MaxPods != 0 || cfg.ContextRate != 50 {
		t.Fatalf("settings absent from the environment changed: %+v", cfg)
	}
	// Every flag has its variable.
	fs.VisitAll(func(f *flag.Flag) {
		if want := "MCPP_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_")); EnvName(f.Name) != want {
			t.Errorf("EnvName(%q) = %q, want %q", f.Name, EnvName(f.Name), want)
		}
	})

	bad := map[string]string{"MCPP_MAX_PODS": "many"}
	fs2 := flag.NewFlagSet("x", flag.ContinueOnError)
	c2 := DefaultConfig()
	c2.RegisterFlags(fs2)
	err := ApplyEnv(fs2, func(k string) (string, bool) { v, ok := bad[k]; return v, ok })
	if err == nil || !strings.Contains(err.Error(), "MCPP_MAX_PODS") {
		t.Fatalf("a bad value: %v, want an error naming MCPP_MAX_PODS", err)
	}
}

func TestConfigValidateRejectsUnusableLimits(t *testing.T) {
	if err := func() error { c := DefaultConfig(); return c.Validate() }(); err != nil {
		t.Fatalf("the defaults do not validate: %v", err)
	}
	for name, edit := range map[string]func(*Config){
		"rate NaN":             func(c *Config) { c.Rate = math.NaN() },
		"rate +Inf":            func(c *Config) { c.Rate = math.Inf(1) },
		"context rate NaN":     func(c *Config) { c.ContextRate = math.NaN() },
		"create rate +Inf":     func(c *Config) { c.ContextCreateRate = math.Inf(1) },
		"rate 0":               func(c *Config) { c.Rate = 0 },
		"burst 0":              func(c *Config) { c.Burst = 0 },
		"context burst 0":      func(c *Config) { c.ContextBurst = 0 },
		"max depth 0":          func(c *Config) { c.MaxDepth = 0 },
		"max pods -1":          func(c *Config) { c.MaxPods = -1 },
		"max connections 0":    func(c *Config) { c.MaxConnections = 0 },
		"contexts per pod 0":   func(c *Config) { c.MaxContextsPerPod = 0 },
		"timeout overflows":    func(c *Config) { c.ContextTimeout = 2_500_000 * time.Hour },
		"retention overflows":  func(c *Config) { c.ContextRetention = 2_500_000 * time.Hour },
		"negative retention":   func(c *Config) { c.ContextRetention = -time.Second },
		"send queue 0":         func(c *Config) { c.SendQueue = 0 },
		"participants per pod": func(c *Config) { c.MaxParticipantsPerPod = 0 },
		"advertise alone":      func(c *Config) { c.ClusterAdvertise = "127.0.0.1:6222" },
		"advertise no port": func(c *Config) {
			c.ClusterName, c.ClusterListen, c.ClusterAdvertise = "x", "127.0.0.1:6222", "127.0.0.1"
		},
		"advertise port 0": func(c *Config) {
			c.ClusterName, c.ClusterListen, c.ClusterAdvertise = "x", "127.0.0.1:6222", "proxy:0"
		},
		"advertise, external NATS": func(c *Config) { c.NATSURL, c.ClusterAdvertise = "nats://x:4222", "proxy:6222" },
		"history cache -1":         func(c *Config) { c.HistoryCache = -1 },
	} {
		c := DefaultConfig()
		edit(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	c := DefaultConfig()
	c.ContextTimeout, c.ContextRetention = 24*365*time.Hour, 0
	c.Rate = 1e-3
	c.ClusterName, c.ClusterListen, c.ClusterAdvertise = "x", "127.0.0.1:6222", "proxy.example:16222"
	if err := c.Validate(); err != nil {
		t.Fatalf("a year's timeout, no retention and a slow rate are usable: %v", err)
	}
}

// TestMaxPodsHoldsWhatMemoryHolds: --max-pods 0 is what a quarter of the
// memory holds at 64 KiB a pod (--max-memory when set), never below the
// 1,000 of earlier versions; a number given stands.
func TestMaxPodsHoldsWhatMemoryHolds(t *testing.T) {
	c := DefaultConfig()
	c.MaxMemory = 8 << 30
	if got := c.PodsMemoryHolds(); got != 8<<30/4/(64<<10) {
		t.Fatalf("8 GiB holds %d pods, want %d", got, 8<<30/4/(64<<10))
	}
	c.MaxMemory = 64 << 20
	if got := c.PodsMemoryHolds(); got != 1000 {
		t.Fatalf("64 MiB holds %d pods, want the floor of 1000", got)
	}
	c.MaxPods = 7
	if got := c.PodsMemoryHolds(); got != 7 {
		t.Fatalf("--max-pods 7 gives %d", got)
	}
	c = DefaultConfig()
	if got := c.PodsMemoryHolds(); got < 1000 {
		t.Fatalf("this machine's memory holds %d pods", got)
	}
}

// TestHistoryCacheBounded: the node's cache of history messages is
// --history-cache, but never more than --history-bytes (the stream holds
// no more) nor an eighth of the node's memory; 0 is none.
func TestHistoryCacheBounded(t *testing.T) {
	c := DefaultConfig()
	c.MaxMemory = 8 << 30
	if got := c.historyCacheBytes(); got != 256<<20 {
		t.Fatalf("the default with 8 GiB: %d bytes, want 256 MiB", got)
	}
	c.HistoryBytes = 100 << 20
	if got := c.historyCacheBytes(); got != 100<<20 {
		t.Fatalf("--history-bytes 100MiB: a cache of %d bytes, want 100 MiB", got)
	}
	c.MaxMemory = 512 << 20
	if got := c.historyCacheBytes(); got != 64<<20 {
		t.Fatalf("--max-memory 512MiB: a cache of %d bytes, want 64 MiB", got)
	}
	c.HistoryCache = 0
	if got := c.historyCacheBytes(); got != 0 {
		t.Fatalf("--history-cache 0: a cache of %d bytes", got)
	}
}

// TestConfigAuditAndMetricsFlags: the audit trail's and the per-pod
// metrics' flags are checked at start, each refusal naming its flag: a
// trail that is a directory, or in a directory that does not exist; a
// rotation size under a megabyte; a negative count of backups or pods.
// Standard output, and 0 backups (keep all) or 0 pods (all "other"), are
// fine.
func TestConfigAuditAndMetricsFlags(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		edit func(*Config)
		flag string
	}{
		"a directory":         {func(c *Config) { c.AuditLog = dir }, "--audit-log"},
		"no such directory":   {func(c *Config) { c.AuditLog = dir + "/missing/audit.log" }, "--audit-log"},
		"size 0":              {func(c *Config) { c.AuditLogMaxSize = 0 }, "--audit-log-max-size"},
		"backups -1":          {func(c *Config) { c.AuditLogMaxBackups = -1 }, "--audit-log-max-backups"},
		"metrics max pods -1": {func(c *Config) { c.MetricsMaxPods = -1 }, "--metrics-max-pods"},
	} {
		c := DefaultConfig()
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%s: %v, want a refusal naming %s", name, err, tc.flag)
		}
	}
	c := DefaultConfig()
	c.AuditLog, c.AuditLogMaxBackups, c.MetricsMaxPods = "-", 0, 0
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.AuditLog = dir + "/audit.log"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if d := DefaultConfig(); d.AuditLog != "" || d.AuditLogMaxSize != DefaultAuditLogMaxSize || d.AuditLogMaxBackups != DefaultAuditLogMaxBackups || d.MetricsMaxPods != DefaultMetricsMaxPods {
		t.Fatalf("defaults: %q %d %d %d", d.AuditLog, d.AuditLogMaxSize, d.AuditLogMaxBackups, d.MetricsMaxPods)
	}
}

// TestHistoryOwnedOnlyAlone: the history writer's rounds (one
// acknowledgement a round, placed by counting the stream's sequences)
// are for a node whose stream nobody else can publish into: not across
// a cluster or an external NATS, and not with the embedded server's port
// open (a client of it publishing while the stream refused one of a
// round's messages would make the count come out right and every message
// of the round be told a sequence one off).
func TestHistoryOwnedOnlyAlone(t *testing.T) {
	for _, c := range []struct {
		args []string
		own  bool
	}{
		{nil, true},
		{[]string{"--history-dir", t.TempDir()}, true},
		{[]string{"--nats-port", "4333"}, false},
		{[]string{"--cluster-name", "c"}, false},
		{[]string{"--nats-url", "nats://127.0.0.1:4222"}, false},
	} {
		cfg := DefaultConfig()
		fs := flag.NewFlagSet("mcpp-gateway", flag.ContinueOnError)
		cfg.RegisterFlags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if got := cfg.ownsHistory(); got != c.own {
			t.Errorf("%v: the node writes its own history alone: %v, want %v", c.args, got, c.own)
		}
	}
}
