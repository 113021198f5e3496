package ivm_test

import (
	"os"
	"testing"

	"github.com/rindle-sh/rindle-go/internal/pgtest"
)

func TestMain(m *testing.M) {
	// The crash test re-runs this binary as a producer process; it must not start a cluster.
	if url := os.Getenv(crashProducerEnv); url != "" {
		os.Exit(crashProducer(url))
	}
	pgtest.Main(m)
}
