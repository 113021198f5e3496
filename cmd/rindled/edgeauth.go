package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/rindle-sh/rindle-go/auth"
	"github.com/rindle-sh/rindle-go/httpapi"
)

// serveEdgeAuth serves httpapi.EdgeAuth on -addr until ctx ends: the authorization an HTTP cache
// in front of rindled asks for every protocol read it serves. It verifies tokens with serve's
// settings (the secret, the issuers file) and needs no database.
func serveEdgeAuth(ctx context.Context, s *settings, stdout io.Writer) error {
	logger := s.logger(stdout)
	_, all, err := issuers(s)
	if err != nil {
		return s.reported(logger, err)
	}
	vctx, stopKeys := context.WithCancel(context.WithoutCancel(ctx))
	defer stopKeys()
	verifier, err := auth.New(vctx, auth.Config{Issuers: all, Logger: logger})
	if err != nil {
		return s.reported(logger, err)
	}
	edge, err := httpapi.NewEdgeAuth(httpapi.EdgeAuthConfig{Verifier: verifier})
	if err != nil {
		return s.reported(logger, err)
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return s.reported(logger, err)
	}
	srv := &http.Server{Handler: edge, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: s.idleTimeout}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	logger.Info("rindled edge-auth listening", "url", "http://"+ln.Addr().String(), "version", version())
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	logger.Info("stopped")
	return nil
}
