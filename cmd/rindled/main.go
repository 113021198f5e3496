// Command rindled is the Rindle streams server: the live and durable planes, the CDC reader and
// the view behind an HTTP API. Run `rindled -h` for its settings.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// Once the first signal has cancelled ctx, a second one gets the default action and aborts
	// the drain.
	go func() {
		<-ctx.Done()
		stop()
	}()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		var reported *reportedError
		if !errors.As(err, &reported) { // a reported error is already the log's last line
			fmt.Fprintln(os.Stderr, "rindled:", err)
		}
		os.Exit(1)
	}
}
