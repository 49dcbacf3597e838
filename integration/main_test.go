package integration

import (
	"github.com/mcpp/gateway/integration/internal/harness"

	"os"
	"testing"
)

func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }
