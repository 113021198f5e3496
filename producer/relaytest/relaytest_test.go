package relaytest_test

import (
	"testing"

	"github.com/rindle-sh/rindle-go/producer"
	"github.com/rindle-sh/rindle-go/producer/relaytest"
)

func TestHubPassesTheRelaySuite(t *testing.T) {
	t.Parallel()
	relaytest.Run(t, func(*testing.T) *producer.Relay { return relaytest.NewHub().Relay() })
}
