package otel_test

import (
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.uber.org/goleak"
)

func propagationCarrier(h http.Header) propagation.TextMapCarrier {
	return propagation.HeaderCarrier(h)
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
