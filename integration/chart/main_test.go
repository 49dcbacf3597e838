// Package chart tests the Helm chart deploy/helm/mcpp-gateway with Helm
// itself (chart_test.go), down to the command line its StatefulSet
// renders, run as a cluster of real gateways (chart_cluster_test.go).
// Helm is built from its Go module (testdata/helm pins it) the first
// time; in a package of its own, so that its build (minutes on a fresh
// machine) has go test's -timeout to itself.
package chart

import (
	"os"
	"testing"

	"github.com/mcpp/gateway/integration/internal/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }
