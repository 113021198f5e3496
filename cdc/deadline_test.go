package cdc

import (
	"context"
	"testing"
	"time"
)

// The reader's receive context is kept while its deadline stays and made again when the
// deadline moves (a status update was sent) or it ended; the one it replaces is cancelled.
func TestDeadlineContextIsKeptWhileItsDeadlineStays(t *testing.T) {
	parent := t.Context()
	var d deadlineContext
	defer d.stop()
	at := time.Now().Add(time.Hour)
	first := d.until(parent, at)
	if got := d.until(parent, at); got != first {
		t.Fatal("the same deadline made a new context")
	}
	if dl, ok := first.Deadline(); !ok || !dl.Equal(at) {
		t.Fatalf("deadline %v, want %v", dl, at)
	}
	second := d.until(parent, at.Add(time.Second))
	if second == first {
		t.Fatal("a new deadline kept the old context")
	}
	if first.Err() == nil {
		t.Fatal("the replaced context was not cancelled")
	}
	// A deadline already past ends the context at once; the next call makes a fresh one even
	// for the same deadline, so a receive never starts on an ended context.
	past := time.Now().Add(-time.Second)
	ended := d.until(parent, past)
	if ended.Err() == nil {
		t.Fatal("a past deadline did not end the context")
	}
	if again := d.until(parent, past); again == ended {
		t.Fatal("an ended context was handed out again")
	}
	// The parent's end ends it.
	ctx, cancel := context.WithCancel(parent)
	child := d.until(ctx, at)
	cancel()
	if child.Err() == nil {
		t.Fatal("the parent's cancel did not reach it")
	}
}
