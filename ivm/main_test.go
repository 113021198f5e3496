package ivm_test

import (
	"testing"

	"github.com/rindle-sh/rindle-go/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
