// Package deploy tests what an operator deploys: the container image that
// deploy/build-image.sh builds (image_test.go) and the Helm chart
// deploy/helm/mcpp-gateway (chart_test.go), down to the command line its
// StatefulSet renders, run as a cluster of real gateways
// (chart_cluster_test.go). Each test installs what it needs: Debian's
// podman, and Helm built from its Go module (testdata/helm pins it).
package deploy

import (
	"os"
	"testing"

	"github.com/mcpp/gateway/integration/internal/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }
