package committertest_test

import (
	"testing"

	"github.com/rindle-sh/rindle-go/producer"
	"github.com/rindle-sh/rindle-go/producer/committertest"
)

// The commit-callback mode, over the reference store, passes the committer suite.
func TestCommitFuncOverMemStorePassesTheCommitterSuite(t *testing.T) {
	t.Parallel()
	committertest.Run(t, func(*testing.T) committertest.Harness {
		m := committertest.NewMemStore()
		return committertest.Harness{Committer: producer.CommitFunc(m.Commit), Create: m.Create, Stored: m.Stored}
	})
}
