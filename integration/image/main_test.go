package image

import (
	"os"
	"testing"

	"github.com/mcpp/gateway/integration/internal/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }
